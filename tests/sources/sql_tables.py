"""Helpers for the SQL source tests: build tables with a separate writer engine, read whole plans."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import pairwise
from typing import Any

import pytest
import sqlalchemy as sa

from shardwise.sources.base import Key, SourcePlan
from shardwise.sources.sql.source import SqlSource


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def any_url(request: pytest.FixtureRequest) -> str:
    """The same test on SQLite and on PostgreSQL."""
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


@contextmanager
def writer(url: str, **kwargs: Any) -> Iterator[sa.Engine]:
    """An engine that writes test data; the source under test only reads."""
    engine = sa.create_engine(url, **kwargs)
    try:
        yield engine
    finally:
        engine.dispose()


def create_docs(
    engine: sa.Engine,
    rows: Sequence[tuple[Any, Any]] = (),
    *,
    key_type: str = "",
    primary: bool = True,
    table: str = "docs",
) -> None:
    """(Re)create ``docs (id, text, updated_at)`` holding ``rows``."""
    pg = engine.dialect.name == "postgresql"
    key_type = key_type or ("BIGINT" if pg else "INTEGER")
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
        pk = " PRIMARY KEY" if primary else ""
        conn.execute(sa.text(f"CREATE TABLE {table} (id {key_type}{pk}, text TEXT, updated_at TEXT)"))
    insert(engine, rows, table=table)


def with_docs(url: str, rows: Sequence[tuple[Any, Any]]) -> str:
    """``url`` once ``docs`` there holds ``rows``."""
    with writer(url) as eng:
        create_docs(eng, rows)
    return url


def insert(engine: sa.Engine, rows: Sequence[tuple[Any, Any]], *, table: str = "docs") -> None:
    if not rows:
        return
    with engine.begin() as conn:
        conn.execute(
            sa.text(f"INSERT INTO {table} (id, text) VALUES (:id, :text)"),
            [{"id": k, "text": v} for k, v in rows],
        )


def read_all(src: SqlSource, plan: SourcePlan) -> list[tuple[Key, Any]]:
    """Every row of every shard, in shard order; checks each shard's count against the plan."""
    out: list[tuple[Key, Any]] = []
    for shard in plan.shards:
        rows = [(r.key, r.value) for r in src.read(plan, shard)]
        if plan.params.get("expected_rows_exact"):
            assert len(rows) == shard.expected_rows, shard
        out += rows
    return out


def assert_partition(plan: SourcePlan) -> None:
    """Bounds chain: first lo and last hi are None, each hi is the next lo."""
    bounds = [s.bounds for s in plan.shards]
    assert [s.shard_id for s in plan.shards] == list(range(len(bounds)))
    if bounds:
        assert bounds[0]["lo"] is None and bounds[-1]["hi"] is None
    for left, right in pairwise(bounds):
        assert left["hi"] is not None and left["hi"] == right["lo"]
