"""SqlSource: identifiers checked against the schema, filters, identity without secrets, plan checks."""

from __future__ import annotations

import dataclasses

import pytest
import sql_tables
import sqlalchemy as sa
from sql_tables import create_docs, read_all, with_docs, writer

from shardwise.errors import ConfigError, SourceError, TransientError
from shardwise.sources.base import Source
from shardwise.sources.sql.db import Database
from shardwise.sources.sql.source import SqlSource

ROWS = [(k, f"row {k}") for k in range(1, 21)]

any_url = sql_tables.any_url  # the SQLite/PostgreSQL fixture, shared by the SQL source tests


@pytest.fixture
def docs_url(any_url: str) -> str:
    return with_docs(any_url, ROWS)


def _count_docs(url: str) -> int:
    with writer(url) as eng, eng.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM docs")).scalar_one())


def test_is_a_source(docs_url: str) -> None:
    with SqlSource(docs_url, "docs", "id", "text") as src:
        source: Source = src
        assert source.kind == "sql" and source.identity.endswith(".docs")


@pytest.mark.parametrize(
    ("table", "key", "text", "message"),
    [
        ("docs; DROP TABLE docs", "id", "text", r"table 'docs; DROP TABLE docs' not in schema .*are: docs$"),
        ("docs", 'id" OR 1=1 --', "text", r"""column 'id" OR 1=1 --' not in table 'docs'; columns are: id"""),
        ("docs", "id", "txt", r"column 'txt' not in table 'docs'; columns are: id, text, updated_at"),
        ("docs", "id", "text) FROM docs; --", r"column 'text\) FROM docs; --' not in table 'docs'"),
    ],
)  # fmt: skip
def test_bad_identifiers_are_refused_and_listed(
    docs_url: str, table: str, key: str, text: str, message: str
) -> None:
    with pytest.raises(SourceError, match=message):
        SqlSource(docs_url, table, key, text)
    assert _count_docs(docs_url) == len(ROWS)


def test_bad_schema_is_refused_and_listed(docs_url: str) -> None:
    with pytest.raises(
        SourceError, match=r"schema 'main; DROP TABLE docs' not in the database; schemas are: "
    ):
        SqlSource(docs_url, "docs", "id", "text", schema="main; DROP TABLE docs")
    assert _count_docs(docs_url) == len(ROWS)


def test_key_must_be_integer_or_text(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, [(1.5, "a")], key_type="REAL")
    with pytest.raises(ConfigError, match=r"key column 'id' has type REAL.*integer or text"):
        SqlSource(any_url, "docs", "id", "text")


def test_text_key_and_named_schema(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, [("b", "2"), ("a", "1"), ("c", "3")], key_type="TEXT")
    schema = "public" if any_url.startswith("postgresql") else "main"
    with SqlSource(any_url, "docs", "id", "text", schema=schema) as src:
        plan = src.plan(shards=2)
        assert src.identity.endswith(f"#{schema}.docs")
        assert read_all(src, plan) == [("a", "1"), ("b", "2"), ("c", "3")]


@pytest.mark.postgres
def test_a_schema_qualified_table_reads_that_schema(pg_url: str) -> None:
    """``table="app.docs"`` reads app.docs, not the default schema's docs; the plan records both parts."""
    with writer(pg_url) as eng, eng.begin() as conn:
        conn.execute(sa.text('CREATE SCHEMA app; CREATE SCHEMA "we.ird"'))
        conn.execute(sa.text("CREATE TABLE public.docs (id int PRIMARY KEY, text text)"))
        conn.execute(sa.text("INSERT INTO public.docs VALUES (1, 'the decoy')"))
        for table in ("app.docs", '"we.ird"."Do cs"'):
            conn.execute(sa.text(f"CREATE TABLE {table} (id int PRIMARY KEY, text text)"))
            conn.execute(sa.text(f"INSERT INTO {table} VALUES (1, 'one'), (2, 'two')"))
    for given, schema, table in (("app.docs", "app", "docs"), ('"we.ird"."Do cs"', "we.ird", "Do cs")):
        with SqlSource(pg_url, given, "id", "text") as src:
            plan = src.plan(shards=2)
            assert src.identity.endswith(f"#{schema}.{table}")
            assert (plan.param("schema"), plan.param("table")) == (schema, table)
            assert read_all(src, plan) == [(1, "one"), (2, "two")]
    with pytest.raises(ConfigError, match=r"names schema 'app' and schema='public' is given too"):
        SqlSource(pg_url, "app.docs", "id", "text", schema="public")


def test_a_schema_qualified_table_is_refused_on_sqlite(sqlite_url: str) -> None:
    with writer(sqlite_url) as eng:
        create_docs(eng, ROWS)
    with pytest.raises(
        SourceError, match=r"a SQLite source .* has no schemas; give the table alone: --table docs"
    ):
        SqlSource(sqlite_url, "main.docs", "id", "text")


def test_where_filter_selects_rows(docs_url: str) -> None:
    where = "id % 2 = 0 AND text LIKE 'row %' AND text <> 'a:b'"  # a %, and a colon that is not a parameter
    with SqlSource(docs_url, "docs", "id", "text", where=where) as src:
        plan = src.plan(shards=3)
        assert plan.params["where"] == where and plan.expected_rows == 10
        assert [k for k, _ in read_all(src, plan)] == list(range(2, 21, 2))


def test_where_filter_cannot_widen_a_shard(docs_url: str) -> None:
    with SqlSource(docs_url, "docs", "id", "text", where="id < 5 OR id > 15") as src:
        plan = src.plan(shards=2)
        per_shard = [[r.key for r in src.read(plan, s)] for s in plan.shards]
    # Unparenthesised, "id < 17 AND id < 5 OR id > 15" would put 17..20 in the first shard too.
    assert per_shard == [[1, 2, 3, 4, 16], [17, 18, 19, 20]]


def test_broken_filter_is_a_source_error(docs_url: str) -> None:
    src = SqlSource(docs_url, "docs", "id", "text", where="no_such_column > 1")
    with src, pytest.raises(SourceError, match=r"planning .* failed: .*no_such_column"):
        src.plan()


@pytest.mark.postgres
def test_password_never_leaves_the_url(pg_url: str) -> None:
    with writer(pg_url) as eng:
        create_docs(eng, ROWS)
    secret_url = pg_url.replace("root@", "root:s3cr3t-pw@")  # trust auth ignores it
    with SqlSource(secret_url, "docs", "id", "text", where="id > 0") as src:
        plan = src.plan(shards=2)
        assert "s3cr3t" not in src.identity and "s3cr3t" not in plan.to_json()
        assert src.identity.startswith("postgresql+psycopg://root@127.0.0.1:5432/sw_")
    with pytest.raises(SourceError) as info:
        SqlSource(secret_url, "nope", "id", "text")
    assert "s3cr3t" not in str(info.value)


def test_unreachable_database_is_transient() -> None:
    with pytest.raises(TransientError, match="may pass on a retry") as info:
        SqlSource("postgresql+psycopg://root:pw-x@127.0.0.1:1/db", "docs", "id", "text")
    assert "pw-x" not in str(info.value)


@pytest.mark.parametrize("url", ["not a url", "nosuchdialect://x/y"])
def test_bad_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="postgresql\\+psycopg://"):
        SqlSource(url, "docs", "id", "text")


def test_read_refuses_a_plan_for_another_source(docs_url: str) -> None:
    with SqlSource(docs_url, "docs", "id", "text") as src:
        plan = src.plan(shards=2)
    with SqlSource(docs_url, "docs", "id", "text", where="id > 3") as other:
        with pytest.raises(ConfigError, match=r"plan has where=None but this source has where='id > 3'"):
            list(other.read(plan, plan.shards[0]))
        foreign = dataclasses.replace(plan, identity="sqlite:///elsewhere.db#main.docs")
        with pytest.raises(ConfigError, match="read a plan with the source that made it"):
            list(other.read(foreign, plan.shards[0]))
    with SqlSource(docs_url, "docs", "id", "text") as src:
        bad_shard = dataclasses.replace(plan.shards[0], bounds={"lo": None, "hi": "11"})
        with pytest.raises(ConfigError, match="shard bound hi='11' is not a int key"):
            list(src.read(plan, bad_shard))


class _DriverError(Exception):
    def __init__(self, message: str, sqlstate: str | None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("sqlstate", "message", "mapped"),
    [
        ("40001", "could not serialize access due to concurrent update", TransientError),
        ("40P01", "deadlock detected", TransientError),
        ("57P01", "terminating connection due to administrator command", TransientError),
        ("42P01", 'relation "docs" does not exist', SourceError),
        ("25006", "cannot execute INSERT in a read-only transaction", SourceError),
        (None, "database is locked", TransientError),
        (None, "no such column: txt", SourceError),
    ],
)
def test_driver_errors_map_onto_the_tree(
    sqlite_url: str, sqlstate: str | None, message: str, mapped: type[Exception]
) -> None:
    # PostgreSQL errors carry a SQLSTATE; SQLite ones only a message. No connection is made.
    url = "postgresql+psycopg://user:hunter2@127.0.0.1:1/db" if sqlstate else sqlite_url
    db = Database(url)
    with pytest.raises(mapped, match=r"^reading.*: .*") as info, db.errors("reading"):
        raise sa.exc.OperationalError("SELECT 1", {}, _DriverError(f"{message} (hunter2)", sqlstate))
    assert isinstance(info.value.__cause__, sa.exc.DBAPIError)
    assert "hunter2" not in str(info.value) or not sqlstate
