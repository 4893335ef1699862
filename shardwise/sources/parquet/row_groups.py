"""Cut a dataset's row groups into shards, balanced by rows, without reading any data.

The row groups are taken in one deterministic order (object key, then row
group index) and cut into contiguous runs, so a shard is a list of spans: a
span is a contiguous row-group range ``[first, stop)`` of one object. Row
counts come from the Parquet footers, so the cut is exact and repeatable.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shardwise.sources.base import Shard
from shardwise.sources.parquet.objects import ObjectInfo
from shardwise.sources.sizing import Sizing

__all__ = ["RowGroup", "cut", "cut_by_count", "cut_by_rows", "to_shard"]


@dataclass(frozen=True, slots=True)
class RowGroup:
    """One row group as its footer describes it. ``null_keys`` is ``None`` when the footer has no count."""

    obj: ObjectInfo
    index: int
    rows: int
    null_keys: int | None
    key_range: tuple[Any, Any] | None = None
    """The smallest and largest key, from the footer's statistics (ints or texts); None without them.

    Only the check that keys are unique reads it (:mod:`shardwise.sources.parquet.unique`)."""

    @property
    def readable_rows(self) -> int:
        """The rows a read yields: rows with a null key are skipped, when the footer says how many."""
        return self.rows - (self.null_keys or 0)


def cut(groups: Sequence[RowGroup], sizing: Sizing) -> list[list[RowGroup]]:
    """Cut by the shard count when one is given, else into runs of the sizing's rows per shard."""
    if sizing.shards is not None:
        return cut_by_count(groups, sizing.shards)
    per_shard = sizing.rows_per_shard_for(sum(g.readable_rows for g in groups))
    assert per_shard is not None  # no shard count: the sizing gives rows per shard
    return cut_by_rows(groups, per_shard)


def cut_by_count(groups: Sequence[RowGroup], shards: int) -> list[list[RowGroup]]:
    """Exactly ``min(shards, len(groups))`` non-empty runs, each as near to total/shards rows as can be.

    Cut ``i`` goes at the row-group boundary nearest to ``i * total / shards``
    rows (the earlier one on a tie), leaving at least one row group for each
    run still to come. A row group is never split, so with fewer row groups
    than ``shards`` the plan has one shard per row group.
    """
    count = min(shards, len(groups))
    cumulative = [0]
    for group in groups:
        cumulative.append(cumulative[-1] + group.rows)
    total, cuts, previous = cumulative[-1], [0], 0
    for i in range(1, count):
        candidates = range(previous + 1, len(groups) - (count - i) + 1)
        previous = min(candidates, key=lambda j: (abs(cumulative[j] * count - i * total), j))
        cuts.append(previous)
    cuts.append(len(groups))
    return [list(groups[a:b]) for a, b in itertools.pairwise(cuts) if b > a]


def cut_by_rows(groups: Sequence[RowGroup], rows_per_shard: int) -> list[list[RowGroup]]:
    """Greedy runs of at most ``rows_per_shard`` rows; a row group larger than that is a shard alone."""
    runs: list[list[RowGroup]] = []
    current: list[RowGroup] = []
    rows = 0
    for group in groups:
        if current and rows + group.rows > rows_per_shard:
            runs.append(current)
            current, rows = [], 0
        current.append(group)
        rows += group.rows
    if current:
        runs.append(current)
    return runs


def to_shard(shard_id: int, groups: Sequence[RowGroup]) -> Shard:
    """The shard for one run of row groups, merging neighbours in the same object into one span."""
    spans: list[dict[str, Any]] = []
    for group in groups:
        last = spans[-1] if spans else None
        if last is not None and last["path"] == group.obj.key and last["row_groups"][1] == group.index:
            last["row_groups"][1] = group.index + 1
        else:
            spans.append(_span(group))
    expected = sum(g.readable_rows for g in groups)
    return Shard(shard_id, expected, {"spans": spans})


def _span(group: RowGroup) -> dict[str, Any]:
    obj = group.obj
    return {"path": obj.key, "etag": obj.etag, "size": obj.size, "row_groups": [group.index, group.index + 1]}
