"""Where a run stands, computed from its shards' ledger rows: the figures a progress display shows.

Works for every runner alike, since every worker writes its progress to the
ledger (see :mod:`~shardwise.pipeline.reporter`): a done shard counts its
``rows_in``, a running one the rows its current attempt has pushed through
the engine. Shards done before a resume count as done.

The sums of the model's count outputs (a generator's tokens, see
:mod:`shardwise.model.counts`) are read the same way: a done shard's totals, a
running shard's sums so far. They come from the rows' own outputs, so the
rate of ``completion_tokens`` is the tokens generated per second.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from shardwise.model.counts import added
from shardwise.results import ShardProgress

__all__ = ["ProgressReading", "read_progress"]


@dataclass(frozen=True, slots=True)
class ProgressReading:
    """A reading of a run's progress at one moment (not a database snapshot). Immutable: listeners in
    other threads may keep it.

    ``rows_total`` is the plan's expected rows, with the actual ``rows_in``
    for done shards (and a running shard's progress where it passed its
    estimate). ``rows_before`` is what was already done when watching began
    (a resumed run's done shards): it is not this run's speed. ``final`` marks
    the reading taken once the fan-out ended. ``counts`` sums the model's
    count outputs over the rows done (empty for a model that declares none),
    and ``counts_before`` is their part in ``rows_before``.
    """

    run_id: str
    shards_total: int
    shards_done: int
    shards_failed: int
    rows_total: int
    rows_done: int
    dead_letters: int
    elapsed_s: float
    rows_before: int = 0
    final: bool = False
    counts: Mapping[str, int] = field(default_factory=dict)
    counts_before: Mapping[str, int] = field(default_factory=dict)

    @property
    def percent(self) -> float:
        """Rows done as a percentage of rows expected; 100 for a run with nothing to do."""
        return 100.0 * self.rows_done / self.rows_total if self.rows_total else 100.0

    @property
    def rows_per_s(self) -> float:
        """Rows done per second since watching began."""
        return (self.rows_done - self.rows_before) / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def counts_per_s(self) -> dict[str, float]:
        """Each count output per second since watching began: for a generator, tokens generated/s."""
        seconds = self.elapsed_s
        if seconds <= 0:
            return dict.fromkeys(self.counts, 0.0)
        return {name: (n - self.counts_before.get(name, 0)) / seconds for name, n in self.counts.items()}

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the current speed; None before any speed is known, 0.0 when nothing is left."""
        left = self.rows_total - self.rows_done
        if left <= 0:
            return 0.0
        rate = self.rows_per_s
        return left / rate if rate > 0 else None


def read_progress(
    run_id: str,
    shards: Iterable[ShardProgress],
    *,
    elapsed_s: float,
    rows_before: int = 0,
    final: bool = False,
    counts_before: Mapping[str, int] | None = None,
) -> ProgressReading:
    """The snapshot of ``run_id`` from its shards' rows (:meth:`Ledger.shard_progress`)."""
    total = done = failed = rows_total = rows_done = dead = 0
    counted: list[Mapping[str, int]] = []
    for shard in shards:
        total += 1
        if shard.status == "done":
            done += 1
            rows = shard.rows_in or 0
            rows_total += rows
            rows_done += rows
            dead += shard.rows_failed or 0
            counted.append(shard.progress_counts)  # the done-mark's totals
            continue
        if shard.status == "failed":
            failed += 1  # its rows were rolled back: none of them count as done
            rows_total += shard.expected_rows
            continue
        rows = shard.progress_rows or 0
        rows_total += max(shard.expected_rows, rows)
        rows_done += rows
        dead += shard.progress_failed or 0
        counted.append(shard.progress_counts)
    return ProgressReading(
        run_id,
        total,
        done,
        failed,
        rows_total,
        rows_done,
        dead,
        elapsed_s,
        rows_before,
        final,
        added(*counted),
        dict(counts_before or {}),
    )
