"""The key must be unique across a Parquet dataset: each row's result is stored, and found again, under it.

Two rows with one key, in two files or in one, would both be read and
scored, but the results hold one row per (key, model version): one result
silently replaces the other while the run counts both. SQL sources refuse
such a table (:mod:`shardwise.sources.sql.unique`); Parquet has no unique
constraint to declare, so a Parquet source reads its key column to check,
in :meth:`~shardwise.sources.parquet.ParquetSource.check` and when it plans:

* **Every listed object is checked**, those an only-new run skips too: they
  are current rows, and a new object that repeats one of their keys would
  overwrite that key's result. Objects without the key column are left to
  planning, which refuses them when it reads them.
* **Only the key column is read**, one row group at a time, and memory is
  bounded by the footers' statistics: row groups whose key ranges
  (min, max) overlap are checked together, and no others need be, since a
  repeated key lies in overlapping ranges. A dataset written in key order
  holds one row group's keys at a time; one whose keys are scattered over
  every file (random UUIDs) holds all of its keys at once. A row group
  without statistics is read once more, first, to learn its range.
* **The count of NULL keys comes with it**: each row group read is counted
  exactly, also where its footer has no null count, so a plan's
  ``null_keys`` is exact (see :class:`KeyScan`).

The error names up to five repeated keys, the smallest first, and the
objects that hold them, relative to the location (whose own name may come
from a secret reference and is not echoed).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from shardwise.errors import ConfigError
from shardwise.sources.files.objects import ObjectStore, relative_key
from shardwise.sources.files.spans import RowGroup
from shardwise.sources.parquet.footers import Footer
from shardwise.sources.parquet.key_reads import KeyReader, KeyScan, read_ahead

__all__ = ["SHOWN_DUPLICATES", "check_unique_keys"]

SHOWN_DUPLICATES = 5
"""How many repeated keys the error names (as the SQL check does)."""
_SHOWN_OBJECTS = 5


def check_unique_keys(store: ObjectStore, footers: Sequence[Footer], key: str) -> KeyScan:
    """Raise :class:`ConfigError` naming up to five keys that appear on more than one row of ``footers``'
    objects, and the objects holding them; otherwise, what the scan counted."""
    reader = KeyReader(store, key, {f.obj.key: f.metadata for f in footers if f.metadata is not None})
    groups = [g for f in footers if f.key_present for g in f.row_groups if g.null_keys != g.rows]
    ranged = [(g, r) for g, r in zip(groups, reader.ranges(groups), strict=True) if r is not None]
    repeated: list[Any] = []
    holders: set[str] = set()
    for cluster, arrays in read_ahead(reader.keys, list(_clusters(ranged))):
        found, where = _repeats(cluster, arrays, SHOWN_DUPLICATES - len(repeated))
        repeated += found
        holders |= where
        if len(repeated) >= SHOWN_DUPLICATES:
            break
    if repeated:
        raise _not_unique(key, repeated, sorted(relative_key(store.identity, h) for h in holders))
    return reader.scan


def _clusters(ranged: Iterable[tuple[RowGroup, tuple[Any, Any]]]) -> Iterator[list[RowGroup]]:
    """Row groups whose key ranges overlap, transitively, in order of their smallest key; ints and texts
    apart (a dataset with both is refused when planned, for its key type)."""
    by_kind: dict[type, list[tuple[RowGroup, tuple[Any, Any]]]] = {}
    for group, bounds in ranged:
        by_kind.setdefault(type(bounds[0]), []).append((group, bounds))
    for kind in sorted(by_kind, key=lambda k: k.__name__):
        cluster: list[RowGroup] = []
        high: Any = None
        for group, (low, top) in sorted(by_kind[kind], key=lambda item: item[1]):
            if cluster and low > high:
                yield cluster
                cluster, high = [], None
            cluster.append(group)
            high = top if high is None or top > high else high
        if cluster:
            yield cluster


def _repeats(cluster: Sequence[RowGroup], arrays: list[pa.Array], limit: int) -> tuple[list[Any], set[str]]:
    """Up to ``limit`` keys repeated within ``cluster`` (its row groups' ``arrays`` of keys), smallest
    first, and the objects that hold them."""
    counts = (
        pa.table({"k": pa.chunked_array(arrays, type=arrays[0].type)})
        .group_by("k")
        .aggregate([("k", "count")])
    )
    twice = counts.filter(pc.greater(counts["k_count"], 1))["k"].combine_chunks()
    if len(twice) == 0:
        return [], set()
    wanted = twice.take(pc.sort_indices(twice))[:limit]
    holders = {g.obj.key for g, a in zip(cluster, arrays, strict=True) if pc.any(pc.is_in(a, wanted)).as_py()}
    return wanted.to_pylist(), holders


def _not_unique(key: str, repeated: Sequence[Any], holders: Sequence[str]) -> ConfigError:
    shown = ", ".join(repr(k) for k in repeated)
    more = f" (the first {SHOWN_DUPLICATES})" if len(repeated) == SHOWN_DUPLICATES else ""
    one = len(repeated) == 1
    files = ", ".join(holders[:_SHOWN_OBJECTS])
    if len(holders) > _SHOWN_OBJECTS:
        files += f" and {len(holders) - _SHOWN_OBJECTS} more"
    return ConfigError(
        f"key column {key!r} of the Parquet dataset is not unique: {'key' if one else 'keys'} {shown}{more} "
        f"{'appears' if one else 'appear'} on more than one row, in {files}; each row's result is stored "
        "under its key, so one would overwrite another: rewrite the files so that each key appears once, "
        "or choose a unique --key"
    )
