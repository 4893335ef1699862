"""Per-batch figures and the run summary the engine reports."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from shardwise.model.counts import Counts, added

__all__ = ["BatchStats", "EngineStats"]


@dataclass(frozen=True, slots=True)
class BatchStats:
    """What one batch cost, with and without padding, and where the time went.

    The costs are in the model's item cost unit, tokens for text (hence the
    names, which the ledger's ``tokens_per_s`` shares); for an image model,
    pixels. ``padded_tokens`` is what the model's collate padded the batch to.
    """

    rows: int
    real_tokens: int
    """The items' own cost: the sum of ``Item.cost``."""
    padded_tokens: int
    """The collated batch's ``padded_cost``: for text, rows x padded width."""
    wait_s: float
    """Time the consumer waited for this batch to be prepared (input-bound time)."""
    compute_s: float
    """Forward pass, the copy of outputs back to the host and their conversion to columns."""
    oom_splits: int = 0
    counts: Mapping[str, int] = field(default_factory=dict)
    """The batch's count outputs summed over its rows (a generator's tokens; see
    :mod:`shardwise.model.counts`)."""


@dataclass(slots=True)
class EngineStats:
    """Totals for a run. ``padding_efficiency`` is real cost over computed (padded) cost."""

    rows: int = 0
    rows_failed: int = 0
    rows_truncated: int = 0
    batches: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0
    wait_s: float = 0.0
    compute_s: float = 0.0
    wall_s: float = 0.0
    oom_splits: int = 0
    counts: Counts = field(default_factory=dict)
    """The model's count outputs summed over the rows scored: real outputs, not the cost estimate."""
    first_batch_at: float | None = None
    """Wall-clock time (Unix seconds) the first forward pass started: where a run's start-up ends."""
    last_batch_at: float | None = None
    """Wall-clock time the last forward pass ended: where a run's tear-down begins."""

    def add(self, batch: BatchStats) -> None:
        now = time.time()
        if self.first_batch_at is None:
            self.first_batch_at = now - batch.compute_s
        self.last_batch_at = now
        self.batches += 1
        self.real_tokens += batch.real_tokens
        self.padded_tokens += batch.padded_tokens
        self.wait_s += batch.wait_s
        self.compute_s += batch.compute_s
        self.oom_splits += batch.oom_splits
        if batch.counts:
            self.counts = added(self.counts, batch.counts)  # a new dict: readers in other threads keep theirs

    @property
    def padding_efficiency(self) -> float:
        return self.real_tokens / self.padded_tokens if self.padded_tokens else 1.0

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Real (unpadded) cost per second of wall time: the tokens batches are budgeted by.

        For a generator that is prompt plus ``max_new_tokens`` per row, an
        upper bound; the tokens it generated are in :attr:`counts_per_s`.
        """
        return self.real_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def counts_per_s(self) -> dict[str, float]:
        """Each count output per second of wall time (a generator's ``completion_tokens``: tokens/s)."""
        return {name: n / self.wall_s if self.wall_s > 0 else 0.0 for name, n in self.counts.items()}

    def as_dict(self) -> dict[str, Any]:
        """Every total plus the derived rates, ready for JSON, a log line or a table."""
        out = asdict(self)
        out.update(
            padding_efficiency=self.padding_efficiency,
            rows_per_s=self.rows_per_s,
            tokens_per_s=self.tokens_per_s,
            counts_per_s=self.counts_per_s,
        )
        return out
