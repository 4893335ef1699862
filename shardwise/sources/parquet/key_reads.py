"""Read the key column of row groups, and nothing else, many at once in order: the uniqueness check's I/O.

:func:`read_ahead` reads row groups in a fixed order with a few reads in
flight (S3 reads are latency-bound) and a bounded window ahead of the
consumer, so memory holds the window and what the consumer keeps, whatever
the dataset's size. Each object's footer comes from planning, which read it
already (or is read once and kept), so reads fetch only key column chunks.
Keys come as int64 or large_string, whatever the file's integer width or
string type, so that row groups written differently compare; NULL keys are
counted, then dropped (:class:`KeyScan`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardwise.errors import SourceError
from shardwise.sources.files.objects import ObjectStore
from shardwise.sources.files.spans import RowGroup

__all__ = ["KeyReader", "KeyScan", "read_ahead"]

_READ_THREADS = 8  # as many reads in flight as footers get (footers.py)
_WINDOW = 32
"""Row groups read ahead of the consumer, at most."""


@dataclass
class KeyScan:
    """What reading the key columns counted: the NULL keys of each row group read, by (object, index)."""

    null_keys: dict[tuple[str, int], int] = field(default_factory=dict)

    def exact(self, group: RowGroup) -> RowGroup:
        """``group`` with the NULL keys counted by this scan, where its footer did not count them."""
        counted = self.null_keys.get((group.obj.key, group.index))
        if group.null_keys is not None or counted is None:
            return group
        return RowGroup(group.obj, group.index, group.rows, counted, group.key_range)


class KeyReader:
    """Reads one row group's keys at a time; safe to call from several threads."""

    def __init__(self, store: ObjectStore, key: str, footers: Mapping[str, Any] | None = None) -> None:
        self._store, self._key = store, key
        self._footers: dict[str, Any] = dict(footers or {})
        """Each object's ``FileMetaData`` by key: the planner's, or read once on first use."""
        self._lock = threading.Lock()
        self._footer_locks: dict[str, threading.Lock] = {}
        self.scan = KeyScan()

    def keys(self, group: RowGroup) -> pa.Array:
        """The row group's non-NULL keys; its NULL keys are counted in :attr:`scan`."""
        obj = group.obj
        with self._lock:
            footer_lock = self._footer_locks.setdefault(obj.key, threading.Lock())
        try:
            with self._store.open(obj) as handle:
                with footer_lock:  # row groups of one object read at once wait for one read of its footer
                    parquet = pq.ParquetFile(handle, pre_buffer=False, metadata=self._footers.get(obj.key))
                    self._footers[obj.key] = parquet.metadata
                column = parquet.read_row_group(group.index, columns=[self._key], use_threads=False)[0]
            keys = _normal(column.combine_chunks())
        except (pa.ArrowException, OSError) as exc:  # pyarrow raises a damaged page as OSError
            raise SourceError(
                f"cannot read key column {self._key!r} of row group {group.index} of Parquet object "
                f"{obj.key!r} to check that keys are unique: {exc}; rewrite the file, then run again"
            ) from exc
        self.scan.null_keys[(obj.key, group.index)] = keys.null_count
        return keys.drop_null()

    def key_range(self, group: RowGroup) -> tuple[Any, Any] | None:
        """(min, max) of the row group's keys, read, for one whose footer has no statistics; None when
        every key is NULL."""
        keys = self.keys(group)
        if len(keys) == 0:
            return None
        bounds = pc.min_max(keys)
        return bounds["min"].as_py(), bounds["max"].as_py()

    def ranges(self, groups: Sequence[RowGroup]) -> list[tuple[Any, Any] | None]:
        """Each group's key range: its footer's, or read (a few at a time) where the footer has none."""
        unknown = [g for g in groups if g.key_range is None]
        with ThreadPoolExecutor(max_workers=_READ_THREADS) as pool:
            read = dict(zip((id(g) for g in unknown), pool.map(self.key_range, unknown), strict=True))
        return [g.key_range if g.key_range is not None else read[id(g)] for g in groups]


def _normal(keys: pa.Array) -> pa.Array:
    if pa.types.is_dictionary(keys.type):
        keys = keys.dictionary_decode()
    return keys.cast(pa.int64() if pa.types.is_integer(keys.type) else pa.large_string())


def read_ahead(
    read: Callable[[RowGroup], pa.Array], clusters: Sequence[Sequence[RowGroup]]
) -> Iterator[tuple[Sequence[RowGroup], list[pa.Array]]]:
    """Each cluster with ``read`` of each of its row groups, in order, reads running ahead in threads."""
    order = iter([(i, group) for i, cluster in enumerate(clusters) for group in cluster])
    pending: deque[tuple[int, Future[pa.Array]]] = deque()
    with ThreadPoolExecutor(max_workers=_READ_THREADS) as pool:
        try:
            current, arrays = 0, list[pa.Array]()
            while True:
                while len(pending) < _WINDOW and (step := next(order, None)) is not None:
                    pending.append((step[0], pool.submit(read, step[1])))
                if not pending:
                    break
                number, future = pending.popleft()
                if number != current:
                    yield clusters[current], arrays
                    current, arrays = number, []
                arrays.append(future.result())
            if clusters:
                yield clusters[current], arrays
        finally:
            for _, future in pending:  # the consumer stopped early: no reads for nothing
                future.cancel()
