"""A shard scored in chunks: every ``rows`` results in input order are merged and marked as one step.

Why chunks: a shard merged once, at its end, loses all its scoring to one
dropped connection or one killed worker. Cut into chunks, a shard commits as
it goes. A failed database step is retried on a new connection with the
chunk still in memory, until the shard's retry deadline
(:mod:`shardwise.retry_policy`), and a retried or resumed attempt starts
after the last committed chunk, so at most one chunk of scoring is ever done
twice.

Why rows, not time: a chunk ends after a fixed number of rows, so its
boundaries are the same in every attempt (under the run's snapshot), and a
chunk ends exactly where an engine window ends (:meth:`ChunkConfig.engine_config`).
The engine sorts and batches each window by length, and a row's result
depends, in its last bits, on the batch it was scored in; with aligned
windows a resumed shard scores every row in the very batch an uninterrupted
run would, so its results are identical, and the engine never runs ahead of
the chunk it is filling: a chunk is committed before the next window's first
forward pass.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from shardwise.batch.config import EngineConfig
from shardwise.errors import ConfigError, TransientError
from shardwise.lineage import value_fingerprint
from shardwise.model.counts import added
from shardwise.records import DeadLetter, ResultRow
from shardwise.sources.base import Key, SourceRow

if TYPE_CHECKING:
    from shardwise.batch.engine import RowResult
    from shardwise.cost.budget import BudgetGuard
    from shardwise.cost.meter import ChunkMeter
    from shardwise.results import Chunk, ChunkStart, ChunkWriter

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "GENERATION_CHUNK_ROWS",
    "IMAGE_CHUNK_ROWS",
    "ChunkConfig",
    "InputFingerprints",
    "commit_chunks",
    "progress_after",
]

DEFAULT_CHUNK_ROWS = 8192
"""One engine window (``EngineConfig.window_rows``): a minute of MiniLM on two CPU cores, seconds on a GPU."""
IMAGE_CHUNK_ROWS = 1024
"""An image model's chunk, and so its engine window: a processed 224-pixel picture is about 600 KB of
float32 held until its batch runs, so a window of 8192 would hold 5 GB; 1024 hold about 600 MB."""
GENERATION_CHUNK_ROWS = 1024
"""A generator's chunk: generating a row costs a forward pass per new token, a hundred times an
encoder's row, so 8192 rows would be an hour of work a kill could lose; 1024 rows still leave the
engine windows of several KV-cache batches to sort by length."""


@dataclass(frozen=True)
class ChunkConfig:
    """How a shard commits: every ``rows`` rows in input order.

    Smaller chunks lose less to a crash and hold less in memory (a chunk's
    outputs wait in memory until merged: 8192 rows of 384 floats are 12 MiB);
    each costs a few milliseconds of fixed database work (a staging table, a
    lock, a mark). ``rows`` must be a multiple of the engine's window (or
    smaller than it: the window then shrinks to the chunk).
    """

    rows: int = DEFAULT_CHUNK_ROWS

    def __post_init__(self) -> None:
        if not isinstance(self.rows, int) or isinstance(self.rows, bool) or self.rows < 1:
            raise ConfigError(
                f"chunk rows must be a positive integer (default {DEFAULT_CHUNK_ROWS}); got {self.rows!r}"
            )

    def engine_config(self, config: EngineConfig | None) -> EngineConfig:
        """``config`` with windows that end where chunks end; a ConfigError when they cannot."""
        config = config or EngineConfig()
        window = min(config.window_rows, self.rows)
        if self.rows % window:
            raise ConfigError(
                f"chunk rows {self.rows} is not a multiple of the engine's window_rows {window}: a chunk "
                "must end where a window ends, so that a resumed shard scores the same batches; use "
                f"{window * max(1, self.rows // window)} or {window * (self.rows // window + 1)}, or a "
                f"window_rows that divides {self.rows}"
            )
        return replace(config, window_rows=window)


Progress = Callable[[int, int, Mapping[str, int]], object]
"""Records an attempt's ``(rows, failed, counts)``: see :mod:`shardwise.pipeline.reporter`."""


def progress_after(write: Progress, start: ChunkStart) -> Progress:
    """``write`` for live progress, counting what was committed before this attempt started too."""

    def counted(rows: int, failed: int, counts: Mapping[str, int]) -> object:
        return write(start.rows + rows, start.failed + failed, added(start.counts, counts))

    return counted


Joined = tuple[Key, "RowResult", str | None]
"""A row's key as the source gave it, its result, and its input fingerprint."""


class InputFingerprints:
    """Each row's input fingerprint (lineage), joined back to its result by input position.

    The engine gives exactly one result per row, in input order, so the n-th
    result belongs to the n-th row fed in: :meth:`feed` records each row's
    fingerprint as the engine pulls the row, and :meth:`joined` pairs the
    results with them. The engine sees only ``(key, value)``; the queue holds
    only the rows in flight (a window or two). A result whose key is not its
    row's would be an engine bug, and stops the shard rather than mislabel it.
    """

    def __init__(self) -> None:
        self._fed: deque[tuple[Key, str | None]] = deque()

    def feed(self, rows: Iterable[SourceRow]) -> Iterator[tuple[Key, Any]]:
        """The rows as the engine takes them, ``(key, value)``, noting each one's fingerprint."""
        for row in rows:
            self._fed.append((row.key, value_fingerprint(row.value)))
            yield row.key, row.value

    def joined(self, results: Iterable[RowResult]) -> Iterator[Joined]:
        """Each result with the key and fingerprint of the row it came from."""
        for result in results:
            key, fingerprint = self._fed.popleft()
            if result.key != key:
                raise RuntimeError(
                    f"the engine returned key {result.key!r} where row {key!r} was fed: results must "
                    "come back in input order, one per row"
                )
            yield key, result, fingerprint


def commit_chunks(
    results: Iterable[Joined],
    writer: ChunkWriter,
    start: ChunkStart,
    rows: int,
    input_snapshot: str | None,
    meter: ChunkMeter | None = None,
    budget: BudgetGuard | None = None,
) -> bool:
    """Cut ``results`` (input order, each with its input fingerprint) into chunks and commit each as it fills.

    Returns False when the shard turned out to be done (another writer
    finished it): the caller stops. A chunk whose mark another writer wrote
    at a different position (the two read different snapshots) is a
    :class:`TransientError`: a retry starts again after the committed chunks.
    With ``meter``, each chunk carries its device time and cost, and the next
    chunk's clock starts once it is committed. With ``budget``, each commit is
    followed by the next chunk's reservation against the run's budget, before
    the next window is scored: a :class:`~shardwise.errors.BudgetReached`
    stops the shard there.
    """
    cutter = _Cutter(start, rows, input_snapshot, meter)
    for key, result, fingerprint in results:
        chunk = cutter.add(key, result, fingerprint)
        if chunk is not None and not _commit(writer, chunk):
            return False
        if chunk is not None and budget is not None:
            budget.check(chunk.number + 1)
        if chunk is not None and meter is not None:
            meter.restart()
    last = cutter.rest()
    return last is None or _commit(writer, last)


def _commit(writer: ChunkWriter, chunk: Chunk) -> bool:
    done = writer.commit(chunk)
    if done.status == "shard_done":
        return False
    if done.status == "already" and dict(done.stored_position or {}) != dict(chunk.position):
        raise TransientError(
            f"chunk {chunk.number} of shard {writer.shard_id} was committed by another attempt at "
            f"{dict(done.stored_position or {})}, and this attempt read it up to {dict(chunk.position)} "
            "(they read different snapshots); a retry starts after the committed chunks"
        )
    return True


class _Cutter:
    """Collects results into chunks of ``size`` rows, numbering them on from ``start``."""

    def __init__(
        self, start: ChunkStart, size: int, input_snapshot: str | None, meter: ChunkMeter | None = None
    ) -> None:
        self._number, self._rows, self._last = start.chunk, start.rows, start.key
        self._size, self._snapshot, self._meter = size, input_snapshot, meter
        self._scored: list[ResultRow] = []
        self._failed: list[DeadLetter] = []
        self._truncated = 0

    def add(self, key: Key, result: RowResult, fingerprint: str | None) -> Chunk | None:
        """Take one row's result and input fingerprint; the chunk when it is full."""
        if result.ok:
            assert result.values is not None
            self._scored.append(ResultRow(key, result.values, fingerprint or "", result.truncated))
        else:
            error = result.error
            self._failed.append(DeadLetter(key, type(error).__name__, str(error), fingerprint))
        self._truncated += result.truncated
        self._last = key
        return self._cut() if len(self._scored) + len(self._failed) == self._size else None

    def rest(self) -> Chunk | None:
        """The last, partial chunk; None when the results ended on a chunk boundary."""
        return self._cut() if self._scored or self._failed else None

    def _cut(self) -> Chunk:
        # Imported here: the chunk writer brings SQLAlchemy, and ChunkConfig is read by the flow's
        # parameters, which --help builds without it.
        from shardwise.results.chunk_writer import Chunk

        self._rows += len(self._scored) + len(self._failed)
        position = {"rows": self._rows, "key": _json_key(self._last)}
        usage = None if self._meter is None else self._meter.measure(r.values for r in self._scored)
        chunk = Chunk(
            self._number, self._scored, self._failed, self._truncated, position, self._snapshot, usage
        )
        self._number += 1
        self._scored, self._failed, self._truncated = [], [], 0
        return chunk


def _json_key(key: Any) -> Key | None:
    """The key as the position stores it: integers and text only (a SQL resume reads after it)."""
    return key if isinstance(key, (int, str)) and not isinstance(key, bool) else None
