"""The rows of a shard from where its committed chunks end, and the snapshot they are read at.

A retried or resumed attempt reads only what its shard has not committed
(:class:`~shardwise.results.ChunkStart`):

* a **SQL** source reads keys above the last committed key (rows come
  ordered by key, and keys are unique), within the shard's bounds, at the
  plan's snapshot when it is still held, else at a fresh one that the
  reader reports for lineage;
* a **Parquet** source starts that many rows into the shard's spans,
  passing whole row groups over by their footers' counts;
* any other source (a redrive's keyed source) is read from its start and
  the committed rows are dropped unscored.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Iterable, Iterator

from shardwise.results import ChunkStart
from shardwise.sources import ParquetSource
from shardwise.sources.base import Shard, Source, SourcePlan, SourceRow

__all__ = ["open_rows"]

_log = logging.getLogger(__name__)

Opened = tuple[Iterator[SourceRow], str | None, bool]
"""The rows, the snapshot they come from (SQL sources; else the plan's), and whether it is a fresh one."""


@contextlib.contextmanager
def open_rows(source: Source, plan: SourcePlan, shard: Shard, start: ChunkStart) -> Iterator[Opened]:
    """The shard's rows after ``start``; the open reader is closed when the block ends."""
    if start.rows:
        _log.info(
            "shard %d resumes at chunk %d: its first %d rows are committed (last key %r)",
            shard.shard_id, start.chunk, start.rows, start.key,
        )  # fmt: skip
    open_reader = getattr(source, "open_reader", None)
    if open_reader is not None:
        by_key = bool(start.rows) and start.key is not None
        with open_reader(plan, shard, after=start.key if by_key else None) as reader:
            rows = reader.rows if by_key else itertools.islice(reader.rows, start.rows, None)
            yield rows, reader.snapshot, reader.snapshot_lost
        return
    # Parquet skips by row groups' footer counts; other sources read the committed rows and drop them.
    if isinstance(source, ParquetSource):
        read: Iterable[SourceRow] = source.read(plan, shard, skip=start.rows)
        rows = iter(read)
    else:
        read = source.read(plan, shard)
        rows = itertools.islice(read, start.rows, None)
    try:
        yield rows, plan.snapshot, False
    finally:
        close = getattr(read, "close", None)
        if close is not None:
            close()
