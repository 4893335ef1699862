"""How many shards a plan cuts: the one sizing rule every source follows.

A caller asks for exactly ``shards`` shards, or about ``rows_per_shard`` rows
each, or neither. With neither, shards hold at most 10 000 rows, and a run
with several workers gets at least ``min_shards`` shards (the flow asks for 4
per worker) so that a slow shard or a slow worker does not leave the others
idle at the end. That minimum gives way on a small table: no default shard
holds fewer than 500 rows, because every shard has a fixed cost (a ledger
transaction, a staging table, a task run) that a tiny shard would not repay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardwise.errors import ConfigError

__all__ = ["DEFAULT_ROWS_PER_SHARD", "MIN_ROWS_PER_SHARD", "Sizing"]

DEFAULT_ROWS_PER_SHARD = 10_000
MIN_ROWS_PER_SHARD = 500


def _positive(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"{name} must be a positive integer; got {value!r}")


@dataclass(frozen=True)
class Sizing:
    """Exactly ``shards``, or about ``rows_per_shard`` rows each, or the default (see the module)."""

    shards: int | None = None
    rows_per_shard: int | None = None
    min_shards: int = 1
    """With neither of the others given: cut at least this many shards, rows permitting."""

    def __post_init__(self) -> None:
        if self.shards is not None and self.rows_per_shard is not None:
            raise ConfigError(
                f"give shards ({self.shards}) or rows_per_shard ({self.rows_per_shard}), not both"
            )
        _positive("shards", self.shards)
        _positive("rows_per_shard", self.rows_per_shard)
        _positive("min_shards", self.min_shards)

    def rows_per_shard_for(self, rows: int) -> int | None:
        """The rows per shard for a selection of ``rows`` rows; None when a shard count was given."""
        if self.shards is not None:
            return None
        if self.rows_per_shard is not None:
            return self.rows_per_shard
        if self.min_shards == 1:
            return DEFAULT_ROWS_PER_SHARD
        spread = -(-rows // self.min_shards)
        return min(DEFAULT_ROWS_PER_SHARD, max(MIN_ROWS_PER_SHARD, spread))

    def count(self, rows: int, distinct: int) -> int:
        """The number of shards for ``rows`` rows: never more than ``distinct`` keys, zero for no rows."""
        per_shard = self.rows_per_shard_for(rows)
        if per_shard is None:
            assert self.shards is not None  # no rows per shard means a shard count was given
            return min(self.shards, distinct)
        return min(-(-rows // per_shard), distinct)

    def params(self, rows: int) -> dict[str, Any]:
        """What a plan of ``rows`` rows records: the shard count asked for, or the rows per shard used."""
        return {
            "shards": self.shards,
            "rows_per_shard": self.rows_per_shard_for(rows),
            "min_shards": self.min_shards,
        }
