"""Cut a file dataset's row groups into shards, balanced by rows, and read the shards back as spans.

A row group is a run of rows of one object: a Parquet row group (counted by
its footer), a block of CSV or JSON Lines records, or one image. The row
groups are taken in one deterministic order (object key, then row group
index) and cut into contiguous runs, so a shard is a list of spans: a span is
a contiguous row-group range ``[first, stop)`` of one object. The counts are
known before any row is read, so the cut is exact and repeatable.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shardwise.errors import ConfigError
from shardwise.sources.base import Shard, SourcePlan
from shardwise.sources.files.objects import ObjectInfo
from shardwise.sources.sizing import Sizing

__all__ = [
    "RowGroup",
    "Span",
    "cut",
    "cut_by_count",
    "cut_by_rows",
    "plan_objects",
    "shard_spans",
    "to_shard",
]

Span = tuple[ObjectInfo, int, int]
"""An object and its row-group range ``[first, stop)``."""


@dataclass(frozen=True, slots=True)
class RowGroup:
    """One row group as planning counted it. ``null_keys`` is ``None`` when that count is unknown (a
    Parquet footer without it)."""

    obj: ObjectInfo
    index: int
    rows: int
    null_keys: int | None
    key_range: tuple[Any, Any] | None = None
    """The smallest and largest key, from the footer's statistics (ints or texts); None without them.

    Only Parquet's check that keys are unique reads it (:mod:`shardwise.sources.parquet.unique`)."""

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


def shard_spans(shard: Shard) -> list[Span]:
    """The spans in a file plan's shard bounds, as (object, first, stop)."""
    try:
        return [_span_of(raw) for raw in shard.bounds["spans"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"shard {shard.shard_id} bounds {dict(shard.bounds)!r} are not a file plan's "
            '({"spans": [{"path", "etag", "size", "row_groups": [first, stop]}]}); '
            "read a shard with the source kind that planned it"
        ) from exc


def _span_of(raw: Mapping[str, Any]) -> Span:
    first, stop = (int(i) for i in raw["row_groups"])
    return ObjectInfo(str(raw["path"]), str(raw["etag"]), int(raw["size"])), first, stop


def plan_objects(plan: SourcePlan) -> list[tuple[str, str]]:
    """The (object key, ETag) pairs a plan that reads objects (``plan.by_objects``) reads, sorted.

    Record them as seen once the run has succeeded, so the next only-new plan skips them.
    """
    if not plan.by_objects:
        raise ConfigError(
            f"plan_objects needs a plan that reads objects, got a {plan.kind!r} plan of {plan.identity!r}"
        )
    return sorted({(obj.key, obj.etag) for shard in plan.shards for obj, _, _ in shard_spans(shard)})
