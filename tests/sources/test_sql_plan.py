"""SQL shard plans: disjoint and covering, sized as asked, deterministic, computed in the database."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import sql_tables
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sql_tables import assert_partition, create_docs, read_all, writer

from shardwise.errors import ConfigError
from shardwise.sources.base import SourcePlan
from shardwise.sources.sizing import Sizing
from shardwise.sources.sql.plan import build_shards, plan_shards, shard_starts
from shardwise.sources.sql.query import Selection, read_query
from shardwise.sources.sql.schema import reflect_source
from shardwise.sources.sql.source import SqlSource

_SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture]}
int_keys = st.sets(st.integers(-(10**12), 10**12), max_size=60)
text_keys = st.sets(st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=6), max_size=60)

any_url = sql_tables.any_url  # the SQLite/PostgreSQL fixture, shared by the SQL source tests


def _check_covering(url: str, keys: set[int] | set[str], shards: int, key_type: str = "") -> None:
    with writer(url) as eng:
        create_docs(eng, [(k, f"t{i}") for i, k in enumerate(keys)], key_type=key_type)
    with SqlSource(url, "docs", "id", "text") as src:
        plan = src.plan(shards=shards)
        rows = read_all(src, plan)
    assert_partition(plan)
    assert len(plan.shards) == min(shards, len(keys))
    assert all(s.expected_rows > 0 for s in plan.shards)
    assert Counter(k for k, _ in rows) == Counter(keys)  # every key exactly once
    assert plan.expected_rows == len(keys) == plan.params["rows"]


@given(keys=int_keys, shards=st.integers(1, 20))
@settings(max_examples=60, **_SETTINGS)  # type: ignore[arg-type]
def test_sqlite_int_plans_cover_every_row_once(sqlite_url: str, keys: set[int], shards: int) -> None:
    _check_covering(sqlite_url, keys, shards)


@given(keys=text_keys, shards=st.integers(1, 20))
@settings(max_examples=40, **_SETTINGS)  # type: ignore[arg-type]
def test_sqlite_text_plans_cover_every_row_once(sqlite_url: str, keys: set[str], shards: int) -> None:
    _check_covering(sqlite_url, keys, shards, key_type="TEXT")


@pytest.mark.postgres
@given(keys=int_keys, shards=st.integers(1, 20))
@settings(max_examples=15, **_SETTINGS)  # type: ignore[arg-type]
def test_postgres_int_plans_cover_every_row_once(pg_url: str, keys: set[int], shards: int) -> None:
    _check_covering(pg_url, keys, shards)


@pytest.mark.postgres
@given(keys=text_keys, shards=st.integers(1, 20))
@settings(max_examples=15, **_SETTINGS)  # type: ignore[arg-type]
def test_postgres_text_plans_cover_every_row_once(pg_url: str, keys: set[str], shards: int) -> None:
    _check_covering(pg_url, keys, shards, key_type="TEXT")


def test_shards_n_is_exact_and_balanced(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, [(k * 7 + 3, "x") for k in range(100)])  # gaps between keys
    with SqlSource(any_url, "docs", "id", "text") as src:
        plan = src.plan(shards=7)
        assert [s.expected_rows for s in plan.shards] == [15, 14, 14, 15, 14, 14, 14]
        assert len(read_all(src, plan)) == 100
        assert len(src.plan(shards=500).shards) == 100  # fewer distinct keys than shards: one key each


def test_rows_per_shard_sizes_shards(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, [(k, "x") for k in range(1000)])
    with SqlSource(any_url, "docs", "id", "text") as src:
        plan = src.plan(rows_per_shard=300)
        assert [s.expected_rows for s in plan.shards] == [250, 250, 250, 250]
        assert plan.params["rows_per_shard"] == 300 and plan.params["shards"] is None
        default = src.plan()
        assert len(default.shards) == 1 and default.params["rows_per_shard"] == 10_000
        assert default.shards[0].bounds == {"lo": None, "hi": None}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shards": 2, "rows_per_shard": 10}, "not both"),
        ({"shards": 0}, "shards must be a positive integer; got 0"),
        ({"rows_per_shard": -1}, "rows_per_shard must be a positive integer; got -1"),
        ({"shards": True}, "got True"),
    ],
)
def test_bad_sizing_is_a_config_error(sqlite_url: str, kwargs: dict[str, Any], message: str) -> None:
    with writer(sqlite_url) as eng:
        create_docs(eng, [(1, "a")])
    with SqlSource(sqlite_url, "docs", "id", "text") as src, pytest.raises(ConfigError, match=message):
        src.plan(**kwargs)


def test_empty_table_plans_zero_shards(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng)
    with SqlSource(any_url, "docs", "id", "text") as src:
        plan = src.plan(shards=4)
    assert plan.shards == () and plan.expected_rows == 0 and plan.params["rows"] == 0


def test_repeated_keys_give_disjoint_shards(any_url: str) -> None:
    """A source refuses repeated keys (test_sql_keys_unique.py); the cutting itself stays disjoint."""
    skewed = [(1, f"a{i}") for i in range(50)] + [(k, "b") for k in (2, 3, 4, 5)]
    with writer(any_url) as eng:
        create_docs(eng, skewed, primary=False)
        with eng.connect() as conn:
            sel = Selection(reflect_source(conn, "docs", "id", "text", None), eng.dialect.name)
            counts, shards = plan_shards(conn, sel, Sizing(4, None, 1))
            bounds = [(s.bounds["lo"], s.bounds["hi"]) for s in shards]
            rows = [tuple(r) for lo, hi in bounds for r in conn.execute(read_query(sel, lo, hi))]
    exact = {"expected_rows_exact": counts.sizes_exact(eng.dialect.name)}
    plan = SourcePlan("sql", "test", None, shards, exact)
    assert_partition(plan)
    assert len(plan.shards) == 4 and counts.distinct_keys == 5
    assert [(s.bounds["lo"], s.bounds["hi"]) for s in plan.shards] == [(None, 3), (3, 4), (4, 5), (5, None)]
    assert Counter(rows) == Counter(skewed) and plan.expected_rows == 54
    if plan.params["expected_rows_exact"]:  # SQLite counts rows by rank(); PostgreSQL estimates here
        assert [s.expected_rows for s in plan.shards] == [51, 1, 1, 1]
    else:
        assert any_url.startswith("postgresql")


def test_null_keys_are_counted_not_read(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, [(1, "a"), (None, "lost"), (None, "lost too"), (2, None)], primary=False)
    with SqlSource(any_url, "docs", "id", "text") as src:
        plan = src.plan(shards=2)
        rows = read_all(src, plan)
    assert plan.params["null_keys"] == 2
    assert rows == [(1, "a"), (2, None)]  # a NULL text still flows to the engine


def test_planning_is_a_count_then_one_boundary_query(any_url: str) -> None:
    """Planning sends a fixed number of aggregate queries, however many rows or shards."""
    with writer(any_url) as eng:
        create_docs(eng, [(k, "x") for k in range(5000)])
    sent: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        sent.append(statement)

    with SqlSource(any_url, "docs", "id", "text") as src:
        sa.event.listen(sa.Engine, "before_cursor_execute", record)
        try:
            plan = src.plan(shards=50)
        finally:
            sa.event.remove(sa.Engine, "before_cursor_execute", record)
    assert len(plan.shards) == 50 and plan.expected_rows == 5000
    queries = [q for q in sent if "count(" in q or "percentile_disc" in q or "rank()" in q]
    assert len(queries) == 2, sent
    assert "percentile_disc" in queries[1] if "postgresql" in any_url else "dense_rank()" in queries[1]


def test_shard_starts_and_build_shards() -> None:
    assert shard_starts(10, 3) == [4, 7]
    assert shard_starts(3, 3) == [1, 2]
    shards = build_shards([5, 5, 9], [2, 3, 4, 1])  # a repeated boundary merges, never an empty shard
    assert [(s.bounds["lo"], s.bounds["hi"], s.expected_rows) for s in shards] == [
        (None, 5, 2),
        (5, 9, 7),
        (9, None, 1),
    ]
