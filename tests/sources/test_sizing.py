"""The one sizing rule: exactly N shards, about R rows each, or the default with several per worker."""

from __future__ import annotations

import pytest

from shardwise.errors import ConfigError
from shardwise.sources.sizing import DEFAULT_ROWS_PER_SHARD, MIN_ROWS_PER_SHARD, Sizing


@pytest.mark.parametrize(
    ("rows", "min_shards", "shards"),
    [
        (100_000, 1, 10),  # the default: 10 000 rows each
        (100_000, 8, 10),  # already at least 4 per worker for 2 workers
        (3_000, 8, 6),  # spread to the workers, but no shard under 500 rows
        (40_000, 8, 8),  # spread: 5000 each
        (1_000, 4, 2),
        (300, 8, 1),  # too small to split
        (0, 8, 0),
    ],
)
def test_default_sizing_gives_every_worker_several_shards_when_the_table_allows(
    rows: int, min_shards: int, shards: int
) -> None:
    assert Sizing(min_shards=min_shards).count(rows, distinct=rows) == shards


def test_given_sizes_win_over_the_default() -> None:
    assert Sizing(shards=3, min_shards=8).count(100_000, 100_000) == 3
    assert Sizing(rows_per_shard=100, min_shards=8).count(1_000, 1_000) == 10
    assert Sizing(shards=50).count(10, 7) == 7, "never more shards than distinct keys"
    assert Sizing().params(5) == {"shards": None, "rows_per_shard": DEFAULT_ROWS_PER_SHARD, "min_shards": 1}
    assert Sizing(min_shards=8).params(3_000)["rows_per_shard"] == MIN_ROWS_PER_SHARD


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shards": 2, "rows_per_shard": 10}, "not both"),
        ({"shards": 0}, "shards must be a positive integer"),
        ({"rows_per_shard": -1}, "rows_per_shard must be a positive integer"),
        ({"min_shards": 0}, "min_shards must be a positive integer"),
    ],
)
def test_bad_sizing_is_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Sizing(**kwargs)
