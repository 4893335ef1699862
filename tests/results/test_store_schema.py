"""Creating the schema: idempotent, safe in parallel, strict about names and existing layouts."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from results_helpers import OUTPUTS, TABLE, make_plan, make_rows, make_run, make_store, write_shard

from shardwise.errors import ConfigError, TransientError
from shardwise.model import OutputColumn
from shardwise.results import ResultStore
from shardwise.sinks.naming import parse_table_name

LEDGER = {"shardwise_runs", "shardwise_shards", "shardwise_errors", "shardwise_objects"}


def test_ensure_schema_twice_creates_everything_once(db_url: str) -> None:
    with make_store(db_url) as store:
        store.ensure_schema()
        store.ensure_schema()
        tables = set(sa.inspect(store.ledger.engine).get_table_names())
    assert {TABLE, *LEDGER} <= tables


def test_ensure_schema_from_many_threads_at_once(db_url: str) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def ensure() -> None:
        try:
            with make_store(db_url) as store:
                barrier.wait()
                store.ensure_schema()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ensure) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.parametrize(
    "name",
    [
        "x; drop table y",
        "1abc",
        "a.b.c",
        "",
        "docs-emb",
        "a" * 64,
        'x"y',
        "shardwise_runs",
        "SHARDWISE_STAGE",
    ],
)
def test_a_bad_results_table_name_is_a_config_error(sqlite_url: str, name: str) -> None:
    with pytest.raises(ConfigError, match="results table name"):
        ResultStore.sql(sqlite_url, name, OUTPUTS, "int")


def test_table_names_may_carry_a_schema() -> None:
    assert parse_table_name("docs") == (None, "docs")
    assert parse_table_name("analytics.Docs_2") == ("analytics", "Docs_2")


@pytest.mark.parametrize(
    ("outputs", "match"),
    [
        ((), "at least one"),
        ((OutputColumn("run_id", "text"),), "invalid or taken"),
        ((OutputColumn("e", "vector"),), "positive dim"),
        ((OutputColumn("a b", "float"),), "invalid or taken"),
    ],
)
def test_bad_output_columns_are_config_errors(
    sqlite_url: str, outputs: tuple[OutputColumn, ...], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        ResultStore.sql(sqlite_url, TABLE, outputs, "int")


def test_a_table_the_sink_made_gains_a_missing_output_column_a_users_table_is_refused(db_url: str) -> None:
    with make_store(db_url, outputs=OUTPUTS[1:]) as store:
        store.ensure_schema()
    with make_store(db_url) as store:
        store.ensure_schema()  # the sink made it: it gains the nullable column a later run stores
    engine = sa.create_engine(db_url)
    assert "embedding" in {c["name"] for c in sa.inspect(engine).get_columns(TABLE)}
    with engine.begin() as conn:  # the same layout, as a user's own table: no record says the sink made it
        conn.execute(sa.text("DELETE FROM shardwise_tables"))
        conn.execute(sa.text(f"ALTER TABLE {TABLE} DROP COLUMN embedding"))
    engine.dispose()
    with make_store(db_url) as store, pytest.raises(ConfigError) as info:
        store.ensure_schema()
    message = str(info.value)
    assert "column 'embedding'" in message and "missing" in message and "--results-table" in message


def test_an_existing_table_with_another_key_type_is_refused(db_url: str) -> None:
    with make_store(db_url, key_type="text") as store:
        store.ensure_schema()
    with (
        make_store(db_url, key_type="int") as store,
        pytest.raises(ConfigError, match="'source_key' is text"),
    ):
        store.ensure_schema()


def test_an_unrelated_existing_table_is_refused(db_url: str) -> None:
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE docs_emb (id integer PRIMARY KEY, body text NOT NULL)"))
    engine.dispose()
    with make_store(db_url) as store, pytest.raises(ConfigError) as info:
        store.ensure_schema()
    assert "primary key is (id)" in str(info.value)
    assert "extra column 'body'" in str(info.value)


@pytest.mark.postgres
def test_a_schema_qualified_results_table(pg_url: str) -> None:
    engine = sa.create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE SCHEMA analytics"))
    engine.dispose()
    with make_store(pg_url, table="analytics.Docs") as store:
        store.ensure_schema()
        run = make_run(table="analytics.Docs")
        store.ledger.start_run(run, make_plan())
        assert write_shard(store, run, 0, make_rows(range(3)))
        assert store.count_results() == 3
        assert "Docs" in sa.inspect(store.ledger.engine).get_table_names(schema="analytics")


@pytest.mark.postgres
def test_a_missing_schema_is_a_config_error(pg_url: str) -> None:
    with make_store(pg_url, table="nowhere.docs") as store, pytest.raises(ConfigError, match="3F000"):
        store.ensure_schema()


def test_unsupported_urls_are_config_errors() -> None:
    for url, match in [
        ("mysql://u@h/db", "not supported"),
        ("sqlite://", "in memory"),
        ("sqlite:///:memory:", "in memory"),
        ("not a url", "not a URL"),
    ]:
        with pytest.raises(ConfigError, match=match):
            ResultStore.sql(url, TABLE, OUTPUTS, "int")


def test_an_unreachable_database_is_transient_and_hides_the_password() -> None:
    url = "postgresql+psycopg://root:sekret-pw@127.0.0.1:1/nowhere?connect_timeout=2"
    with ResultStore.sql(url, TABLE, OUTPUTS, "int") as store, pytest.raises(TransientError) as info:
        store.ensure_schema()
    assert "sekret-pw" not in str(info.value)
    assert "127.0.0.1:1" in str(info.value)


@pytest.mark.postgres
def test_a_missing_database_is_a_config_error(pg_url: str) -> None:
    url = pg_url.rsplit("/", 1)[0] + "/no_such_database_here"
    with (
        ResultStore.sql(url, TABLE, OUTPUTS, "int") as store,
        pytest.raises(ConfigError, match="does not exist"),
    ):
        store.ensure_schema()
