"""What the store reports back: a shard merge's outcome, a run's counts and summary, stored dead letters."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shardwise.cost.budget import Budget, past_budget
from shardwise.cost.usage import RunUsage
from shardwise.records import RunRecord, RunStatus
from shardwise.results.leases import RunState, run_state

__all__ = [
    "MergeOutcome",
    "RunCounts",
    "RunListing",
    "RunSummary",
    "ShardProgress",
    "StoredDeadLetter",
    "StoredShard",
]


@dataclass(frozen=True, slots=True)
class MergeOutcome:
    """What committing one shard did. Truthy when this writer merged the shard.

    ``committed`` is False when the shard was already done (an earlier attempt
    or a racing writer merged it); then nothing changed and the counts are 0.
    Of the staged rows, ``inserted`` were new keys for this model version,
    ``updated`` replaced a row whose input fingerprint changed, and
    ``unchanged`` matched a stored row's fingerprint and were left alone.
    """

    committed: bool
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0
    dead_letters: int = 0

    def __bool__(self) -> bool:
        return self.committed


@dataclass(frozen=True, slots=True)
class RunCounts:
    """A run's totals, summed over its done shards: by :meth:`Ledger.finish_run`, or live while it runs."""

    rows_in: int = 0
    rows_out: int = 0
    rows_failed: int = 0
    shards_total: int = 0
    shards_done: int = 0
    shards_failed: int = 0
    counts: Mapping[str, int] = field(default_factory=dict)
    """The model's count outputs (a generator's tokens) summed over the whole run: every chunk
    committed, by this process or an earlier one it resumed. :meth:`Ledger.finish_run` fills it;
    empty where the counts were read back from ``shardwise_runs`` or live, and for a model that
    declares no counts (see :mod:`shardwise.model.counts`)."""
    usage: RunUsage = field(default_factory=RunUsage)
    """The whole run's rows, tokens, device time and cost, summed from its committed chunks (see
    :mod:`shardwise.cost`); filled where ``counts`` is."""

    @classmethod
    def counters(cls) -> tuple[str, ...]:
        """The int fields, as ``shardwise_runs`` and the listing queries name their columns."""
        return tuple(name for name in cls.__dataclass_fields__ if name not in ("counts", "usage"))


class _Leased:
    """A stored run's state: its status, or ``abandoned`` when it says running but its lease expired or
    its owner, on this host, is gone."""

    __slots__ = ()
    status: RunStatus
    lease_expires_at: datetime | None
    owner: str | None

    def state(self, now: datetime | None = None) -> RunState:
        """See :func:`~shardwise.results.leases.run_state` and :mod:`.leases`."""
        return run_state(self.status, self.lease_expires_at, now, self.owner)


@dataclass(frozen=True)
class RunSummary(_Leased):
    """A stored run: its record, where it stands, and its counts."""

    record: RunRecord
    status: RunStatus
    triggered_by: str | None
    started_at: datetime | None
    finished_at: datetime | None
    counts: RunCounts
    owner: str | None = None
    """Who holds (or last held) the run's lease: the flow process's ``host:pid/thread@pidns:start``."""
    lease_expires_at: datetime | None = None
    """When the lease runs out unless renewed; None for a run recorded before leases existed."""


@dataclass(frozen=True, slots=True)
class RunListing(_Leased):
    """One run as ``shardwise runs`` lists it; the counts are summed from its shards when read."""

    run_id: str
    status: RunStatus
    started_by: str
    started_at: datetime | None
    finished_at: datetime | None
    model_name: str
    results_table: str
    counts: RunCounts
    """Live, as a running :class:`RunSummary`'s: its done shards, plus the committed chunks of the others."""
    owner: str | None = None
    lease_expires_at: datetime | None = None
    shards_running: int = 0
    """Shards a worker holds a live lease on now."""
    shard_states: Mapping[str, int] = field(default_factory=dict)
    """How many of its shards are in each status now (``{"done": 4, "retrying": 1}``; see
    :mod:`~shardwise.results.shard_states`)."""
    usage: RunUsage = field(default_factory=RunUsage)
    """Its rows, tokens, device time and cost over the chunks committed so far (see :mod:`shardwise.cost`)."""
    budget: Budget | None = None
    """The budget the invocation that last ended it ran under (a resume may change it); None: none, or
    it has not ended yet."""

    def past_budget(self, now: datetime | None = None) -> str | None:
        """``past its budget: $0.0918 spent of the $0.01 budget`` when it ended (not running nor
        abandoned) with its usage past the budget it ended under; else None."""
        if self.state(now) in ("running", "abandoned"):
            return None
        return past_budget(self.budget, self.usage)

    def state(self, now: datetime | None = None) -> RunState:
        """As :meth:`_Leased.state`, and ``stopped`` for a failed run whose failed shards all stopped at
        its budget (``stopped`` in :attr:`shard_states`): nothing went wrong, and ``--resume`` with a
        larger budget goes on."""
        found = _Leased.state(self, now)  # (slots: no zero-argument super())
        if found == "failed" and self.shard_states.get("stopped") and not self.shard_states.get("failed"):
            return "stopped"
        return found


@dataclass(frozen=True, slots=True)
class StoredDeadLetter:
    """One row of ``shardwise_errors``. ``source_key`` is text whatever the source's key type."""

    id: int
    run_id: str
    shard_id: int
    source_key: str | None
    error_class: str
    message: str
    input_fingerprint: str | None
    attempt: int
    created_at: datetime | None
    results_table: str


@dataclass(frozen=True)
class StoredShard:
    """One row of ``shardwise_shards``: where a shard ran, how often, and what it did.

    The counts are None until the shard is done. ``engine`` holds the engine's
    figures and the worker's (``worker``, ``busy_s``, ``model_load_s``).
    """

    shard_id: int
    status: str
    attempts: int
    expected_rows: int
    rows_in: int | None
    rows_out: int | None
    rows_failed: int | None
    rows_inserted: int | None
    rows_updated: int | None
    rows_unchanged: int | None
    started_at: datetime | None
    finished_at: datetime | None
    host: str | None
    device: str | None
    engine: Mapping[str, Any] = field(default_factory=dict)
    last_error: str | None = None


@dataclass(frozen=True, slots=True)
class ShardProgress:
    """One shard as a progress display reads it from ``shardwise_shards``.

    A done shard's counts are in ``rows_in`` and ``rows_failed``; a shard
    still being scored reports ``progress_rows`` and ``progress_failed``
    (None until its current attempt first reports). ``progress_counts`` holds
    the count outputs so far: a running attempt's (earlier attempts'
    committed chunks included), or a done shard's totals.
    """

    shard_id: int
    status: str
    expected_rows: int
    rows_in: int | None
    rows_failed: int | None
    progress_rows: int | None
    progress_failed: int | None
    progress_counts: Mapping[str, int] = field(default_factory=dict)
