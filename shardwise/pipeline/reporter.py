"""Live progress of one shard attempt: counted as batches finish, written to the ledger in the background.

Scoring must never wait for, or fail because of, a progress report. The
engine's batch callback only adds to a counter; a daemon thread writes the
counts to the ledger every ``every_s`` seconds through a function that may
fail or be slow (a busy database): a failed write is logged at debug level
and skipped, and the thread is told to stop when the shard's scoring ends,
without waiting for a write in flight.

Rows are counted as the forward pass finishes them (:class:`BatchStats`),
not as the engine releases them: it releases whole windows of thousands of
rows at once. Dead letters never reach a batch, so they come from the
engine's running totals (:class:`EngineStats`), as do the sums of the
model's count outputs (:mod:`shardwise.model.counts`), which it adds per batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from types import TracebackType

from shardwise.batch.stats import BatchStats, EngineStats
from shardwise.model.counts import Counts

__all__ = ["ProgressReporter"]

_log = logging.getLogger(__name__)

Write = Callable[[int, int, Mapping[str, int]], object]
"""Records ``(rows, failed, counts)`` for the attempt, e.g. a bound :meth:`Ledger.record_progress`."""


class ProgressReporter:
    """Writes an attempt's ``(rows, failed, counts)`` every ``every_s`` seconds while used as a context
    manager.

    Pass :meth:`on_batch` to :meth:`Engine.run` and :meth:`follow` its run's
    stats; ``rows`` then counts scored rows plus dead letters, and ends equal
    to the attempt's ``rows_in``.
    """

    def __init__(self, write: Write, every_s: float = 1.0, name: str = "shardwise-progress") -> None:
        if every_s <= 0:
            raise ValueError(f"every_s must be positive seconds between progress reports; got {every_s!r}")
        self._write, self._every_s = write, every_s
        self._scored = 0
        self._stats: EngineStats | None = None
        self._written: tuple[int, int, Counts] = (0, 0, {})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def on_batch(self, batch: BatchStats) -> None:
        """The engine's batch callback: only counts, so it costs the scoring loop nothing."""
        self._scored += batch.rows

    def follow(self, stats: EngineStats) -> None:
        """Read the dead letters so far from the engine run's live ``stats``."""
        self._stats = stats

    def counts(self) -> tuple[int, int, Counts]:
        """``(rows, failed, counts)`` so far: rows through the engine, how many of them were dead letters,
        and the sums of the model's count outputs over the scored ones."""
        if self._stats is None:
            return self._scored, 0, {}
        failed = self._stats.rows_failed
        return self._scored + failed, failed, dict(self._stats.counts)

    def __enter__(self) -> ProgressReporter:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop reporting; a write in flight finishes on its own (the shard row guards against stale ones)."""
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            counts = self.counts()
            if counts == self._written:
                continue
            try:
                self._write(*counts)
            except Exception as exc:  # a progress report must never fail the shard
                _log.debug("progress report skipped: %s", exc)
                continue
            self._written = counts
