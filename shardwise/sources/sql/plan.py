"""Cutting a SQL table into key ranges, with the work done in the database.

Planning returns O(shards) values to Python, never O(rows): one count query
(rows to plan, distinct keys, NULL keys, rows ``--only-new`` skips), then one
boundary query. On PostgreSQL the boundary query is
``percentile_disc(ARRAY[...]) WITHIN GROUP (ORDER BY key)`` over the distinct
keys, with ``count(*)``; elsewhere (SQLite) it is a window query
(``dense_rank``/``rank``) that returns only the first key of each shard.

Shards split the *distinct* keys evenly. With a unique key (which
:class:`~shardwise.sources.sql.SqlSource` requires, see
:mod:`shardwise.sources.sql.unique`) that is the same as splitting the rows
evenly; were key values repeated, a shard could hold more rows than its share,
but boundaries are always distinct keys, so shards stay disjoint and none is
empty by construction. ``shards=N``
gives exactly N shards when at least N distinct keys are planned, and one
shard per distinct key otherwise. An empty selection plans zero shards.

``expected_rows`` is exact on SQLite (from ``rank()``) and on PostgreSQL when
the key values are unique. With repeated key values on PostgreSQL it is an
estimate: the rows are shared out in proportion to the distinct keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import sqlalchemy as sa

from shardwise.errors import TransientError
from shardwise.sources.base import Key, Shard
from shardwise.sources.sizing import Sizing
from shardwise.sources.sql.query import Selection, boundary_window_query, count_query, quantile_query

__all__ = [
    "Counts",
    "build_shards",
    "plan_shards",
    "shard_starts",
]


@dataclass(frozen=True)
class Counts:
    """What the count query found, in the plan's snapshot."""

    null_keys: int
    skipped_rows: int
    rows: int
    distinct_keys: int

    def sizes_exact(self, dialect: str) -> bool:
        """Whether ``expected_rows`` is exact: always off PostgreSQL, with unique keys on it."""
        return dialect != "postgresql" or self.rows == self.distinct_keys


def shard_starts(distinct: int, shards: int) -> list[int]:
    """The 0-based distinct-key number that starts each shard after the first.

    Key number ``x`` belongs to shard ``floor(x * shards / distinct)``, so shard
    ``i`` starts at ``ceil(i * distinct / shards)``. Needs ``shards <= distinct``.
    """
    return [-(-i * distinct // shards) for i in range(1, shards)]


def build_shards(keys: Sequence[Key], sizes: Sequence[int]) -> tuple[Shard, ...]:
    """Shards from their boundary keys (``len(sizes) == len(keys) + 1``), ``lo <= key < hi``.

    A boundary equal to the previous one is dropped and its rows merged, so
    shards stay disjoint even if the database returned a repeated boundary.
    """
    kept: list[Key] = []
    merged = [sizes[0]]
    for key, size in zip(keys, sizes[1:], strict=True):
        if kept and key == kept[-1]:
            merged[-1] += size
        else:
            kept.append(key)
            merged.append(size)
    bounds: list[Key | None] = [None, *kept, None]
    return tuple(Shard(i, size, {"lo": bounds[i], "hi": bounds[i + 1]}) for i, size in enumerate(merged))


def _apportion(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainder), summing to ``total``."""
    whole = sum(weights)
    shares = [total * w // whole for w in weights]
    by_remainder = sorted(range(len(weights)), key=lambda i: -(total * weights[i] % whole))
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares


def _count(conn: sa.Connection, sel: Selection) -> Counts:
    null_keys, skipped, rows, distinct = conn.execute(count_query(sel)).one()
    return Counts(int(null_keys), int(skipped), int(rows), int(distinct))


def _pg_boundaries(
    conn: sa.Connection, sel: Selection, counts: Counts, n: int
) -> tuple[list[Any], list[int]]:
    starts = shard_starts(counts.distinct_keys, n)
    # (x + 0.5) / d makes percentile_disc's ceil(fraction * d) land on key number x + 1 (1-based).
    fractions = [(x + 0.5) / counts.distinct_keys for x in starts]
    distinct, keys = conn.execute(quantile_query(sel, fractions)).one()
    if distinct != counts.distinct_keys:
        raise TransientError(
            f"the source changed while planning ({counts.distinct_keys} then {distinct} distinct keys) "
            "although both queries share one snapshot; plan again"
        )
    per_shard = [b - a for a, b in pairwise([0, *starts, counts.distinct_keys])]
    if counts.rows == counts.distinct_keys:
        return list(keys), per_shard
    return list(keys), _apportion(counts.rows, per_shard)


def _window_boundaries(
    conn: sa.Connection, sel: Selection, counts: Counts, n: int
) -> tuple[list[Any], list[int]]:
    found = conn.execute(boundary_window_query(sel, n, counts.distinct_keys)).all()
    if len(found) != n - 1:
        raise TransientError(f"the source changed while planning ({n - 1} boundaries expected); plan again")
    before = [0, *(int(rank) - 1 for _, rank in found), counts.rows]
    return [key for key, _ in found], [b - a for a, b in pairwise(before)]


def plan_shards(conn: sa.Connection, sel: Selection, sizing: Sizing) -> tuple[Counts, tuple[Shard, ...]]:
    """Count, then cut into key ranges, on one connection (in one snapshot where there is one)."""
    counts = _count(conn, sel)
    n = sizing.count(counts.rows, counts.distinct_keys)
    if n == 0:
        return counts, ()
    if n == 1:
        return counts, build_shards([], [counts.rows])
    find = _pg_boundaries if sel.dialect == "postgresql" else _window_boundaries
    keys, sizes = find(conn, sel, counts, n)
    return counts, build_shards(keys, sizes)
