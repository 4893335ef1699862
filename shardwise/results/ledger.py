"""The run ledger of one database: runs, their shards, dead letters and the Parquet objects scored.

The ledger is apart from any results table: watchers, redrives and resume
checks read it without knowing a model's outputs, and a worker opens it
before it knows which results table its run writes. Its tables have fixed
names (``shardwise_runs``, ``shardwise_shards``, ``shardwise_errors``,
``shardwise_objects``, ...); their DDL and queries are in ``sql/``. A
ledger of another schema version than this build's is refused on its first
use (:func:`~shardwise.results.ledger_sql.check_version`). A
:class:`~shardwise.results.store.ResultStore` writes results through a
ledger, so a shard's rows and its done-mark share one transaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import sqlalchemy as sa

from shardwise.closing import Closing
from shardwise.cost.budget import Budget, Hold
from shardwise.cost.usage import RunUsage
from shardwise.db.codec import utc_now
from shardwise.db.connect import brief_waits, make_engine, write_transaction
from shardwise.db.errors import mapped_errors, safe_url
from shardwise.db.sqlfiles import query
from shardwise.errors import ConfigError
from shardwise.model.recorded import ProviderBatch
from shardwise.records import RunRecord, RunStatus
from shardwise.results import (
    budget_sql,
    chunk_marks,
    lease_sql,
    ledger_sql,
    outcomes,
    provider_batches,
    shard_sql,
    shard_states,
    usage_sql,
)
from shardwise.results.leases import LEASE_S
from shardwise.retry_policy import DEFAULT_DB_TIMEOUT_S
from shardwise.sources.base import SourcePlan

__all__ = ["Ledger"]

_RUNS = "shardwise_runs"


class Ledger(Closing):
    """The ledger tables in the database at ``url`` (PostgreSQL or SQLite); safe to share between threads.

    On PostgreSQL a statement may run or wait for a lock ``timeout_s`` seconds (a run passes its
    :attr:`~shardwise.retry_policy.RetryPolicy.db_timeout_s`), and a connection that stops answering is
    given up a little later: the try fails as transient (see :mod:`shardwise.db.timeouts`).
    """

    def __init__(self, url: str, *, timeout_s: float = DEFAULT_DB_TIMEOUT_S) -> None:
        self.engine = make_engine(url, timeout_s=timeout_s)
        self.url = safe_url(url)
        self._version_checked = False  # set once the ledger is found at this build's schema version

    def __repr__(self) -> str:
        return f"Ledger({self.url!r})"

    def close(self) -> None:
        """Close pooled connections. Open shard writers keep theirs until they exit."""
        self.engine.dispose()

    @contextmanager
    def reading(self, action: str) -> Iterator[sa.Connection]:
        """A read transaction, database errors mapped onto :mod:`shardwise.errors`."""
        with mapped_errors(action, self.engine.url), self.engine.connect() as conn, conn.begin():
            self._check_version(conn)
            yield conn

    @contextmanager
    def writing(self, action: str) -> Iterator[sa.Connection]:
        """A write transaction (``BEGIN IMMEDIATE`` on SQLite), database errors mapped."""
        with mapped_errors(action, self.engine.url), self.engine.connect() as conn, write_transaction(conn):
            self._check_version(conn)
            yield conn

    def _check_version(self, conn: sa.Connection) -> None:
        """Refuse a ledger of another schema version before its first statement; once its tables are
        found at this build's version, no later transaction of this ledger looks again."""
        if not self._version_checked:
            self._version_checked = ledger_sql.check_version(conn, self.url)

    def exists(self) -> bool:
        """Whether the ledger tables exist here (a dry run or a probe creates nothing)."""
        with self.reading("look for the run ledger") as conn:
            return sa.inspect(conn).has_table(_RUNS)

    def ensure(self, conn: sa.Connection | None = None) -> None:
        """Create the ledger tables and record their schema version if missing; idempotent, and safe
        from several processes at once. A ledger of another schema version is refused."""
        if conn is None:
            with self.writing("create the ledger") as own:
                self.ensure(own)
            return
        if conn.dialect.name == "postgresql":
            conn.execute(query("postgresql", "schema_lock"))
        ledger_sql.create_ledger(conn, self.url)

    def start_run(
        self,
        run: RunRecord,
        plan: SourcePlan,
        *,
        owner: str | None = None,
        lease_s: float = LEASE_S,
        take_from: str | None = None,
    ) -> tuple[RunRecord, SourcePlan]:
        """Record a run and its pending shards, or resume it; returns the run and plan as stored.

        For a run id already stored, nothing of ``run`` or ``plan`` replaces
        what is stored: its failed shards go back to pending, and the stored
        record and plan come back, so shard boundaries and lineage never move
        under a run. With ``owner``, the run's lease is taken for ``lease_s``
        seconds in the same transaction, atomically: only when it expired,
        when ``owner`` holds it, or (forced) from ``take_from``, the owner the
        caller saw; otherwise a :class:`ConfigError` names the holder and
        nothing changes.
        """
        lease = None if owner is None else (owner, lease_s, take_from)
        with self.writing(f"start run {run.run_id}") as conn:
            plan = ledger_sql.start_run(conn, run, plan, utc_now(), lease)
            found = ledger_sql.run_summary(conn, run.run_id)
        assert found is not None  # inserted or kept just above
        return found[0].record, plan

    def run_summary(self, run_id: str) -> outcomes.RunSummary | None:
        """The stored run, or None when the ledger (or the run) does not exist."""
        found = self._run(run_id)
        return None if found is None else found[0]

    def load_run(self, run_id: str) -> RunRecord | None:
        summary = self.run_summary(run_id)
        return None if summary is None else summary.record

    def load_plan(self, run_id: str) -> SourcePlan | None:
        found = self._run(run_id)
        return None if found is None else found[1]

    def load(self, run_id: str) -> tuple[RunRecord, SourcePlan]:
        """The stored record and plan of ``run_id``; a :class:`ConfigError` naming the fix if none."""
        found = self._run(run_id)
        if found is None:
            raise ConfigError(
                f"run {run_id!r} is not in the shardwise_runs table of {self.url}; give a run id listed "
                "there (SELECT run_id, status, started_at FROM shardwise_runs ORDER BY started_at DESC)"
            )
        return found[0].record, found[1]

    def _run(self, run_id: str) -> tuple[outcomes.RunSummary, SourcePlan] | None:
        with self.reading(f"load run {run_id}") as conn:
            if not sa.inspect(conn).has_table(_RUNS):
                return None
            return ledger_sql.run_summary(conn, run_id)

    def redrives_of(
        self, run_id: str, source_identity: str, results_table: str
    ) -> list[tuple[str, SourcePlan]]:
        """The redrives of run ``run_id`` (runs whose plan says ``redrive_of``), oldest first, with plans."""
        with self.reading(f"find the redrives of run {run_id}") as conn:
            runs = ledger_sql.runs_of_source(conn, source_identity, results_table)
        return [(found, plan) for found, plan in runs if plan.params.get("redrive_of") == run_id]

    def done_shards(self, run_id: str) -> set[int]:
        with self.reading(f"list done shards of run {run_id}") as conn:
            return shard_sql.done_shards(conn, run_id)

    def shards(self, run_id: str) -> list[outcomes.StoredShard]:
        """The run's shards as recorded: status, attempts, counts, host, device and worker figures."""
        with self.reading(f"read the shards of run {run_id}") as conn:
            return shard_sql.shards(conn, run_id)

    def record_attempt(
        self,
        run_id: str,
        shard_id: int,
        *,
        host: str | None = None,
        device: str | None = None,
        owner: str | None = None,
        lease_s: float | None = None,
    ) -> int | None:
        """Count an attempt as it starts (the shard is ``running``) and return its number; None when
        the shard is already done. A failed shard raises :class:`~shardwise.errors.ShardStateError`
        until a resume returns it to pending (see :mod:`~shardwise.results.shard_states`).

        With ``owner`` (the worker) and ``lease_s``, the attempt's lease is taken.
        """
        with self.writing(f"record an attempt at shard {shard_id}") as conn:
            return shard_states.start_attempt(
                conn, run_id, shard_id, utc_now(), host=host, device=device, owner=owner, lease_s=lease_s
            )

    def run_over(self, run_id: str) -> bool | None:
        """Whether no process works on run ``run_id`` any more: it finished (completed or failed) or is
        abandoned (see :mod:`~shardwise.results.leases`), and no worker holds a live lease on one of its
        shards. None when this ledger does not know the run.

        What a sink may delete of a run's unfinished writes hangs on this (see
        :mod:`shardwise.sinks.parquet.leftovers`): a run whose flow process died
        while a worker elsewhere still scores is not over.
        """
        summary = self.run_summary(run_id)
        if summary is None:
            return None
        now = utc_now()
        if summary.state(now) == "running":
            return False
        with self.reading(f"read the shard leases of run {run_id}") as conn:
            return not lease_sql.live_shard_owners(conn, run_id, now)

    def renew_run_lease(self, run_id: str, owner: str, lease_s: float) -> bool:
        """Extend ``owner``'s lease on a running run; False once it lost it (taken over, or finished)."""
        with self.writing(f"renew the lease of run {run_id}") as conn:
            return lease_sql.renew_run_lease(conn, run_id, owner, lease_s, utc_now())

    def release_run_lease(self, run_id: str, owner: str) -> bool:
        """Let ``owner``'s lease on a running run expire now: its process stops working on it."""
        with self.writing(f"release the lease of run {run_id}") as conn:
            return lease_sql.renew_run_lease(conn, run_id, owner, 0.0, utc_now())

    def renew_shard_lease(self, run_id: str, shard_id: int, attempt: int, owner: str, lease_s: float) -> bool:
        """Extend a worker's lease on its attempt at a shard; False once a newer attempt took the shard.

        It may wait for a merge holding the row: it runs on the keeper's thread, never the scoring's.
        """
        with self.writing(f"renew the lease of shard {shard_id}") as conn:
            return lease_sql.renew_shard_lease(conn, run_id, shard_id, attempt, owner, lease_s, utc_now())

    def recent_runs(
        self, limit: int = 20, *, status: str | None = None, results_table: str | None = None
    ) -> list[outcomes.RunListing]:
        """The latest runs, newest first, with counts summed from their shards and usage (tokens, device
        time, cost) from their committed chunks; [] without a ledger."""
        with self.reading("list recent runs") as conn:
            if not sa.inspect(conn).has_table(_RUNS):
                return []
            runs = lease_sql.recent_runs(conn, limit, utc_now(), status, results_table)
            states = shard_states.status_counts(conn, (run.run_id for run in runs))
            usage = {run.run_id: usage_sql.run_usage(conn, run.run_id) for run in runs}
        return [
            dataclasses.replace(run, shard_states=states.get(run.run_id, {}), usage=usage[run.run_id])
            for run in runs
        ]

    def record_progress(
        self,
        run_id: str,
        shard_id: int,
        attempt: int,
        rows: int,
        failed: int,
        counts: Mapping[str, int] | None = None,
    ) -> bool:
        """Record how far a running attempt has got: ``rows`` through the engine, ``failed`` dead letters,
        and the sums of the model's count outputs so far (``counts``, say tokens generated).

        Its own short transaction, which never waits on a busy shard row or
        database: the row locked by a merge (PostgreSQL) comes back False, a
        busy SQLite file raises :class:`~shardwise.errors.TransientError`
        after a moment; either way the caller skips this report. False too
        when the attempt is no longer the shard's current one, or it is done.
        """
        action = f"record the progress of shard {shard_id}"
        with (
            mapped_errors(action, self.engine.url),
            self.engine.connect() as conn,
            brief_waits(conn),
            write_transaction(conn),
        ):
            return shard_sql.record_progress(conn, run_id, shard_id, attempt, rows, failed, utc_now(), counts)

    def shard_progress(self, run_id: str) -> list[outcomes.ShardProgress]:
        """The run's shards as a progress display reads them: one quick read of ``shardwise_shards``."""
        with self.reading(f"read the progress of run {run_id}") as conn:
            return shard_sql.shard_progress(conn, run_id)

    def mark_shard_failed(self, run_id: str, shard_id: int, error: str, worker: str | None = None) -> bool:
        """Mark a shard failed (no try is coming) with its last error; False when it was done (it stays
        done) or failed already."""
        with self.writing(f"mark shard {shard_id} failed") as conn:
            return shard_states.mark_failed(conn, run_id, shard_id, error, utc_now(), worker)

    def mark_shard_retrying(self, run_id: str, shard_id: int, error: str, worker: str | None = None) -> bool:
        """Mark a shard retrying: a try failed with ``error`` and another is coming; False when it is done."""
        with self.writing(f"mark shard {shard_id} retrying") as conn:
            return shard_states.mark_retrying(conn, run_id, shard_id, error, utc_now(), worker)

    def shard_tally(self, run_id: str) -> dict[str, int]:
        """How many of the run's shards are in each status now, and how many of its tries failed and
        were tried again (``retried``, from the transitions)."""
        with self.reading(f"count the shard states of run {run_id}") as conn:
            found = dict(shard_states.status_counts(conn, [run_id])[run_id])
            moves = shard_states.transitions(conn, run_id)
        return {**found, "retried": sum(move.to_status == "retrying" for move in moves)}

    def shard_transitions(
        self, run_id: str, shard_id: int | None = None
    ) -> list[shard_states.ShardTransition]:
        """Every status change of the run's shards (of one, with ``shard_id``), in order: from, to,
        attempt, when, worker and error."""
        with self.reading(f"read the shard transitions of run {run_id}") as conn:
            return shard_states.transitions(conn, run_id, shard_id)

    def finish_run(
        self, run_id: str, status: RunStatus, *, owner: str | None = None, budget: Budget | None = None
    ) -> outcomes.RunCounts:
        """Close a run as ``completed`` or ``failed`` and release its lease; counts come from the shards,
        and the sums of the model's count outputs and the run's usage (device time, cost) from every
        chunk the run committed.

        With ``owner``, only while it holds the run: a
        :class:`~shardwise.errors.RunTakenOverError` when another process
        took the run over meanwhile (a forced resume). ``budget``: the one this invocation ran under,
        recorded with the run so that ``shardwise runs`` says when it ended past it.
        """
        if status not in ("completed", "failed"):
            raise ConfigError(f"a run finishes as 'completed' or 'failed'; got {status!r}")
        with self.writing(f"finish run {run_id}") as conn:
            ledger_sql.finish_run(conn, run_id, status, utc_now(), owner)
            ledger_sql.record_budget(conn, run_id, budget)
            found = ledger_sql.run_summary(conn, run_id)
            counts = chunk_marks.run_counts(conn, run_id)
            usage = usage_sql.run_usage(conn, run_id)
        assert found is not None  # finish_run raised if the run is missing
        return dataclasses.replace(found[0].counts, counts=counts, usage=usage)

    def run_usage(self, run_id: str) -> RunUsage:
        """The run's rows, tokens, device time and cost over every chunk committed so far (live while it
        runs); an empty usage when the ledger does not exist."""
        with self.reading(f"read the usage of run {run_id}") as conn:
            if not sa.inspect(conn).has_table(usage_sql.USAGE_TABLE):
                return RunUsage()
            return usage_sql.run_usage(conn, run_id)

    def reserve_chunk(
        self,
        run_id: str,
        shard_id: int,
        attempt: int,
        owner: str,
        chunk: int,
        decide: Callable[[RunUsage, Sequence[Hold]], Hold | None],
    ) -> bool:
        """Hold ``chunk`` of ``owner``'s attempt at a shard against the run's budget, as ``decide`` rules
        from the committed usage and the other shards' live holds, in one transaction that locks the
        run (see :func:`~shardwise.results.budget_sql.reserve_chunk`); False when it held nothing."""
        with self.writing(f"reserve chunk {chunk} of shard {shard_id} against the budget") as conn:
            return budget_sql.reserve_chunk(conn, run_id, shard_id, attempt, owner, chunk, decide, utc_now())

    def seen_objects(self, source_identity: str, destination: str | None) -> frozenset[tuple[str, str]]:
        """(object key, ETag) pairs of Parquet objects that completed runs scored from this source into
        ``destination``, a run's ``results_table`` as the ledger records it (the table name for a
        database, ``FORMAT:LOCATION/TABLE`` for a location); None: into every destination that read it."""
        with self.reading("read seen objects") as conn:
            if not sa.inspect(conn).has_table("shardwise_objects"):
                return frozenset()  # no ledger yet: nothing was seen (and a dry run creates nothing)
            return ledger_sql.seen_objects(conn, source_identity, destination)

    def record_objects(self, run_id: str, source_identity: str, objects: Iterable[tuple[str, str]]) -> None:
        """Remember (object key, ETag) pairs a completed run scored, under its source and the results it
        recorded (its destination); known pairs are kept as they were."""
        with self.writing(f"record objects of run {run_id}") as conn:
            ledger_sql.record_objects(conn, run_id, source_identity, objects, utc_now())

    def dead_letters(self, run_id: str) -> list[outcomes.StoredDeadLetter]:
        with self.reading(f"read dead letters of run {run_id}") as conn:
            return shard_sql.dead_letters(conn, run_id)

    def record_provider_batch(
        self, run_id: str, shard_id: int, window: tuple[str, int, str], batch: ProviderBatch
    ) -> bool:
        """Record a provider batch of the window ``(window_key, position, first_key)`` in a transaction
        of its own, committed when this returns, so the id outlives a kill while the run waits on it.
        False when the window's batch of that index was recorded already (see
        :mod:`~shardwise.results.provider_batches`)."""
        with self.writing(f"record provider batch {batch.batch_id} of shard {shard_id}") as conn:
            return provider_batches.insert_batch(conn, run_id, shard_id, window, batch)

    def provider_batch_ended(
        self, run_id: str, shard_id: int, window_key: str, batch_index: int, status: str
    ) -> None:
        """Record that a window's provider batch ended with ``status``."""
        with self.writing(f"record the end of a provider batch of shard {shard_id}") as conn:
            provider_batches.batch_ended(conn, run_id, shard_id, window_key, batch_index, status, utc_now())

    def window_batches(
        self, run_id: str, shard_id: int, window_key: str
    ) -> list[provider_batches.StoredProviderBatch]:
        """The provider batches recorded for one window of a shard, by index."""
        with self.reading(f"read the provider batches of shard {shard_id}") as conn:
            return provider_batches.window_batches(conn, run_id, shard_id, window_key)

    def provider_batches(self, run_id: str) -> list[provider_batches.StoredProviderBatch]:
        """Every provider batch a run recorded, by shard and window."""
        with self.reading(f"read the provider batches of run {run_id}") as conn:
            return provider_batches.run_batches(conn, run_id)
