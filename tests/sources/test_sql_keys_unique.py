"""A SQL source refuses a repeated key, when planning and in check(); a declared unique key costs nothing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sql_tables
import sqlalchemy as sa
from spec_builder import flat_spec
from sql_tables import create_docs, read_all, writer

from shardwise.errors import ConfigError
from shardwise.sources.sql.source import SqlSource
from shardwise.sources.sql.unique import declared_unique

any_url = sql_tables.any_url  # the SQLite/PostgreSQL fixture, shared by the SQL source tests

DOUBLED = [(k % 50 + 1, f"row {k}") for k in range(100)]  # 100 rows over 50 keys


@contextmanager
def _statements() -> Iterator[list[str]]:
    """The SQL statements any engine of this process sends meanwhile."""
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    sa.event.listen(sa.Engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", note)


def _grouped(statements: list[str]) -> list[str]:
    return [s for s in statements if "HAVING" in s.upper()]


def test_repeated_keys_are_refused_when_planning_and_checking(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, DOUBLED, primary=False)
    with SqlSource(any_url, "docs", "id", "text") as src:
        for attempt in (src.check, src.plan):
            with pytest.raises(ConfigError) as info:
                attempt()
            message = str(info.value)
            assert len(message.splitlines()) == 1
            assert "key column 'id' of " in message
            assert "is not unique: keys 1, 2, 3, 4, 5 (the first 5) appear on more than one row" in message
            assert "add a primary key or unique index on 'id'" in message and "--where" in message


def test_only_the_filtered_rows_must_have_unique_keys(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, [*DOUBLED, (None, "no key"), (None, "no key either")], primary=False)
    with SqlSource(any_url, "docs", "id", "text", where="text IN ('row 0', 'row 1', 'row 2')") as src:
        src.check()
        assert read_all(src, src.plan(shards=2)) == [(1, "row 0"), (2, "row 1"), (3, "row 2")]
    only_7 = SqlSource(any_url, "docs", "id", "text", where="id = 7 OR id IS NULL")
    with only_7, pytest.raises(ConfigError, match=r"is not unique: key 7 appears on more than one row, "):
        only_7.plan()


def test_repeated_text_keys_are_named_as_text(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, [("b", "1"), ("a", "2"), ("b", "3"), ("c", "4")], key_type="TEXT", primary=False)
    with SqlSource(any_url, "docs", "id", "text") as src, pytest.raises(ConfigError, match="key 'b' appears"):
        src.check()


def test_null_keys_do_not_count_as_repeats(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, [(1, "a"), (None, "x"), (None, "y")], primary=False)
    with SqlSource(any_url, "docs", "id", "text") as src:
        src.check()
        assert src.plan().params["null_keys"] == 2


@pytest.mark.parametrize(
    "ddl",
    [
        "CREATE TABLE docs (id BIGINT PRIMARY KEY, text TEXT)",
        "CREATE TABLE docs (id BIGINT UNIQUE, text TEXT)",
        "CREATE TABLE docs (id BIGINT, text TEXT); CREATE UNIQUE INDEX docs_id ON docs (id)",
    ],
    ids=["primary key", "unique constraint", "unique index"],
)
def test_a_declared_unique_key_costs_no_query(any_url: str, ddl: str) -> None:
    with writer(any_url) as eng, eng.begin() as conn:
        for statement in ddl.split("; "):
            conn.execute(sa.text(statement))
        conn.execute(sa.text("INSERT INTO docs VALUES (1, 'a'), (2, 'b')"))
    with SqlSource(any_url, "docs", "id", "text") as src, _statements() as sent:
        src.check()
        src.plan()
    assert _grouped(sent) == []


def test_a_partial_unique_index_is_not_enough(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, [(1, "a"), (1, None), (2, "b")], primary=False)
        with eng.begin() as conn:
            conn.execute(sa.text("CREATE UNIQUE INDEX docs_id ON docs (id) WHERE text IS NOT NULL"))
    src = SqlSource(any_url, "docs", "id", "text")
    with src, _statements() as sent, pytest.raises(ConfigError, match="key 1 appears on more than one row"):
        src.plan()
    assert len(_grouped(sent)) == 1


def _table(*extra: Any) -> sa.Table:
    return sa.Table("t", sa.MetaData(), sa.Column("id", sa.Integer), sa.Column("t", sa.Text), *extra)


def test_only_the_key_alone_counts_as_declared_unique() -> None:
    composite = _table(sa.PrimaryKeyConstraint("id", "t"))
    assert not declared_unique(composite, composite.c.id)
    plain = _table(sa.Index("plain_ix", "id"))
    assert not declared_unique(plain, plain.c.id)
    with_expression = _table()
    sa.Index("expr_ix", with_expression.c.id, sa.func.lower(with_expression.c.t), unique=True)
    assert not declared_unique(with_expression, with_expression.c.id)
    unique = _table(sa.UniqueConstraint("id"))
    assert declared_unique(unique, unique.c.id) and not declared_unique(unique, unique.c.t)


def test_the_run_of_the_issue_is_refused_before_anything_is_scored(sqlite_url: str, pipeline) -> None:
    """100 rows over 50 keys once gave 50 results while the run said 100 were scored."""
    from flow_data import execute

    with writer(sqlite_url) as eng:
        create_docs(eng, DOUBLED, primary=False)
    spec = flat_spec(
        model="tiny", source=sqlite_url, results=sqlite_url, results_table="scores", table="docs"
    )
    with pytest.raises(ConfigError, match="is not unique: keys 1, 2, 3, 4, 5"):
        pipeline.run(spec, "dup")
    assert execute(sqlite_url, "SELECT name FROM sqlite_master WHERE name = 'scores'") == []
