"""The where filter: one parsed expression, allowed functions only, rendered back; reads cannot write."""

from __future__ import annotations

import pytest
import sql_tables
import sqlalchemy as sa
from sql_tables import create_docs, read_all, writer

from shardwise.errors import ConfigError, SourceError
from shardwise.sources.sql import where as sql_filter
from shardwise.sources.sql.snapshot import read_only
from shardwise.sources.sql.source import SqlSource
from shardwise.sources.sql.where import ALLOWED_FUNCTIONS, parse_filter

ROWS = [(k, f"row {k}") for k in range(1, 21)]
DIALECTS = ["postgresql", "sqlite"]

any_url = sql_tables.any_url  # the SQLite/PostgreSQL fixture, shared by the SQL source tests


def _refused(where: str, dialect: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_filter(where, dialect)
    message = str(info.value)
    assert len(message.splitlines()) == 1 and f"where filter {where!r}" in message, message
    return message


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    "where",
    [
        "true) OR (true",  # would escape the parentheses the filter is wrapped in
        "id > 1) OR (1 = 1",
        "id > 1; DELETE FROM docs",
        "id > 1; SELECT 1",
        "SELECT 1",
        "((id > 1)",
        "id > 1)",
        "id > 1 AND",
    ],
)
def test_anything_but_one_expression_is_refused(dialect: str, where: str) -> None:
    message = _refused(where, dialect)
    assert "is not one SQL boolean expression" in message and "balanced parentheses" in message


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    ("where", "name"),
    [
        ("dblink_exec('dbname=x', 'DELETE FROM docs') IS NULL", "dblink_exec"),
        ("dblink('dbname=x', 'SELECT 1') IS NULL", "dblink"),
        ("pg_sleep(10) IS NULL", "pg_sleep"),
        ("set_config('default_transaction_read_only', 'off', false) = 'off'", "set_config"),
        ("nextval('docs_id_seq') > 0", "nextval"),
        ("lo_import('/etc/passwd') > 0", "lo_import"),
        ("length(pg_read_file('/etc/passwd')) > 0", "pg_read_file"),
        ("sneaky()", "sneaky"),
        ("count(*) > 1", "count"),
    ],
)
def test_functions_outside_the_allow_list_are_refused(dialect: str, where: str, name: str) -> None:
    message = _refused(where, dialect)
    assert f"calls {name}(), which a filter may not" in message and "filters may call only: abs, " in message


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    ("where", "rule"),
    [
        ("id IN (SELECT id FROM docs)", "holds a subquery"),
        ("EXISTS (SELECT 1 FROM docs)", "holds a subquery"),
        ("docs.sneaky", "uses 'docs.sneaky'"),  # PostgreSQL reads t.f as f(t)
        ("(docs).sneaky", "uses Dot syntax"),
        ("pg_catalog.pg_sleep(1) IS NULL", "uses Dot syntax"),
        ("id = :id", "holds a bind parameter"),
        ("id = ?", "holds a bind parameter"),
        ("CAST(id AS evil_type) IS NULL", "casts to the type"),
    ],
)
def test_syntax_beyond_a_row_condition_is_refused(dialect: str, where: str, rule: str) -> None:
    assert rule in _refused(where, dialect)


def test_only_postgres_and_sqlite_filters_are_checked() -> None:
    assert "cannot be checked for a mysql source" in _refused("id > 1", "mysql")


@pytest.mark.parametrize("dialect", DIALECTS)
def test_what_is_sent_is_rendered_from_the_checked_tree(dialect: str) -> None:
    # Comments are dropped, so nothing in one can reach the database.
    assert parse_filter("id > 0 /* ) OR (true */", dialect).sql == "id > 0"
    assert parse_filter("id > 0 -- ) OR (true", dialect).sql == "id > 0"
    # A quote inside a literal stays inside it: the literal is re-escaped, not copied.
    checked = parse_filter("text = 'it''s'", dialect)
    assert checked.sql == "text = 'it''s'" and checked.text == "text = 'it''s'"
    assert parse_filter("lower(text) = 'a'", dialect).sql == "LOWER(text) = 'a'"


# One call of every allowed function, in the dialect that has it, and the column types it needs.
PG_CALLS = (
    "lower(text) = upper(text) OR length(text) > char_length(text) OR character_length(text) > 0 "
    "OR octet_length(text) > 0 OR substr(text, 1, 2) = substring(text, 1, 2) OR trim(text) = ltrim(text) "
    "OR rtrim(text) = btrim(text) OR replace(text, 'a', 'b') = concat(text, 'x') OR left(text, 1) = "
    "right(text, 1) OR position('a' in text) = strpos(text, 'a') OR instr(text, 'a') > 0 "
    "OR split_part(text, ' ', 1) = 'row' OR starts_with(text, 'r') OR reverse(text) = lpad(text, 9) "
    "OR rpad(text, 9) = '' OR coalesce(text, 'x') = nullif(text, 'y') OR ifnull(text, 'x') = 'x' "
    "OR abs(id) + round(x) > floor(x) + ceil(x) + ceiling(x) + sign(x) OR round(CAST(x AS numeric), 1) > 1 "
    "OR mod(id, 2) = 0 "
    "OR greatest(id, 2) = least(id, 3) OR now() > ts OR current_date > ts OR current_timestamp > ts "
    "OR localtimestamp > ts OR date(ts) > '2024-01-01' "
    "OR extract(year from ts) = 2024 OR date_part('year', ts) = 2024 OR date_trunc('day', ts) = ts "
    "OR age(ts) > interval '1 day' OR make_date(2024, 1, 1) < ts OR to_char(ts, 'YYYY') = '2024' "
    "OR to_date('2024', 'YYYY') < ts OR to_timestamp(0) < ts OR doc->>'lang' = 'en' OR doc @> '{\"a\": 1}' "
    "OR id = ANY(ARRAY[1, 2]) OR text ~ '^r' OR text ILIKE 'R%' OR id::text = '1' "
    "OR CASE WHEN id > 1 THEN 'a' ELSE 'b' END = 'a' OR id BETWEEN 1 AND 2 OR id IN (1, 2) "
    "OR text LIKE 'a!%' ESCAPE '!' OR ts IS NULL OR text = $$a'b$$"
)
SQLITE_CALLS = (
    "lower(text) = upper(text) OR length(text) > 0 OR substr(text, 1, 2) = 'ro' OR trim(text) = ltrim(text) "
    "OR rtrim(text) = '' OR instr(text, 'a') > 0 OR coalesce(text, 'x') = nullif(text, 'y') "
    "OR ifnull(text, 'x') = 'x' OR abs(id) + round(x, 1) > 0 OR mod(id, 2) = 0 OR current_date > ts "
    "OR current_timestamp > ts OR date(ts) > '2024-01-01' OR time(ts) > '10:00' "
    "OR datetime(ts) > '2024' OR julianday(ts) > 1 OR strftime('%Y', ts) = '2024' OR unixepoch(ts) > 0 "
    "OR text GLOB 'r*' OR text LIKE 'R%' OR CAST(id AS TEXT) = '1' OR id IN (1, 2) OR ts IS NULL"
)


def test_every_allowed_function_is_exercised_below() -> None:
    called = {name for name in ALLOWED_FUNCTIONS if f"{name}(" in PG_CALLS + SQLITE_CALLS}
    no_parens = {"current_date", "current_timestamp", "localtimestamp"}
    assert called | (no_parens & ALLOWED_FUNCTIONS) == ALLOWED_FUNCTIONS


@pytest.mark.postgres
def test_every_allowed_function_runs_on_postgres(pg_url: str) -> None:
    with writer(pg_url) as eng, eng.begin() as conn:
        conn.execute(
            sa.text("CREATE TABLE docs (id BIGINT PRIMARY KEY, text TEXT, ts TIMESTAMP, doc JSONB, x FLOAT)")
        )
        conn.execute(sa.text("INSERT INTO docs VALUES (1, 'row 1', '2024-05-01', '{\"lang\": \"en\"}', 1.5)"))
    with SqlSource(pg_url, "docs", "id", "text", where=PG_CALLS) as src:
        src.check()  # the database plans the rendered filter: every function exists and type-checks
        assert read_all(src, src.plan()) == [(1, "row 1")]


def test_every_allowed_function_runs_on_sqlite(sqlite_url: str) -> None:
    with writer(sqlite_url) as eng, eng.begin() as conn:
        conn.execute(sa.text("CREATE TABLE docs (id INTEGER PRIMARY KEY, text TEXT, ts TEXT, x REAL)"))
        conn.execute(sa.text("INSERT INTO docs VALUES (1, 'row 1', '2024-05-01 12:00:00', 1.5)"))
    with SqlSource(sqlite_url, "docs", "id", "text", where=SQLITE_CALLS) as src:
        src.check()
        assert read_all(src, src.plan()) == [(1, "row 1")]


def test_an_escaping_filter_is_refused_when_the_source_opens(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, ROWS)
    with pytest.raises(ConfigError, match=r"where filter 'true\) OR \(true' is not one SQL boolean"):
        SqlSource(any_url, "docs", "id", "text", where="true) OR (true")


def test_a_comment_cannot_widen_the_filter(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, ROWS)
    with SqlSource(any_url, "docs", "id", "text", where="id <= 4 -- ) OR (true") as src:
        plan = src.plan(shards=2)
        assert plan.params["where"] == "id <= 4 -- ) OR (true"  # recorded as written
        assert [k for k, _ in read_all(src, plan)] == [1, 2, 3, 4]


@pytest.mark.postgres
@pytest.mark.parametrize(
    "where",
    [
        r"text = E'a\' OR true OR \''",  # an escaped quote: one literal, however it is lexed
        "text = $q$a' OR true --$q$",  # dollar quoting
        "text = 'a'/*' OR true --*/",  # a comment opened inside what looks like a literal
        "text = 'x' -- ' OR true",
    ],
)
def test_quoting_tricks_stay_inside_their_literal(pg_url: str, where: str) -> None:
    with writer(pg_url) as eng:
        create_docs(eng, ROWS)
    with SqlSource(pg_url, "docs", "id", "text", where=where) as src:
        assert src.plan().expected_rows == 0


@pytest.fixture
def sneaky_pg(pg_url: str) -> str:
    """PostgreSQL ``docs`` and a volatile plpgsql function ``sneaky()`` that writes to ``log``."""
    with writer(pg_url) as eng:
        create_docs(eng, ROWS)
        with eng.begin() as conn:
            conn.execute(sa.text("CREATE TABLE log (n int)"))
            conn.execute(
                sa.text(
                    "CREATE FUNCTION sneaky() RETURNS bool VOLATILE LANGUAGE plpgsql "
                    "AS $$ BEGIN INSERT INTO log VALUES (1); RETURN true; END $$"
                )
            )
    return pg_url


def _logged(url: str) -> int:
    with writer(url) as eng, eng.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM log")).scalar_one())


@pytest.mark.postgres
def test_a_writing_function_is_refused_by_the_allow_list(sneaky_pg: str) -> None:
    with pytest.raises(
        ConfigError, match=r"where filter 'sneaky\(\)' calls sneaky\(\), which a filter may not"
    ):
        SqlSource(sneaky_pg, "docs", "id", "text", where="sneaky()")
    assert _logged(sneaky_pg) == 0


@pytest.mark.postgres
def test_reads_refuse_a_write_even_from_an_allowed_function(
    sneaky_pg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second line of defence: were a writing function allowed, the read-only transactions stop it."""
    monkeypatch.setattr(sql_filter, "ALLOWED_FUNCTIONS", ALLOWED_FUNCTIONS | {"sneaky"})
    with SqlSource(sneaky_pg, "docs", "id", "text", where="sneaky()") as src:
        with pytest.raises(SourceError, match="read-only transaction"):
            src.plan()
        with pytest.raises(SourceError, match="read-only transaction"):
            list(src.read_keys([1, 2]))
    with writer(sneaky_pg) as eng, eng.connect() as conn:
        read_only(conn).begin()  # the settings every shard read uses
        with pytest.raises(sa.exc.DBAPIError, match="read-only transaction"):
            conn.execute(sa.text("SELECT sneaky()"))
    assert _logged(sneaky_pg) == 0
