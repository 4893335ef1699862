"""SQL reads stream (server-side cursor on PostgreSQL), free their connection when closed early,
and run concurrently from several threads."""

from __future__ import annotations

import itertools
import tracemalloc
from concurrent.futures import ThreadPoolExecutor

import pytest
import sql_tables
import sqlalchemy as sa
from sql_tables import create_docs, insert, writer

from shardwise.sources.sql.source import SqlSource

ROWS = 50_000

any_url = sql_tables.any_url  # the SQLite/PostgreSQL fixture, shared by the SQL source tests


def _sessions(eng: sa.Engine, database: str) -> list[tuple[str, str]]:
    """(state, last query) of the other sessions on the test database."""
    with eng.connect() as conn:
        found = conn.execute(
            sa.text(
                "SELECT state, query FROM pg_stat_activity "
                "WHERE datname = :db AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            ),
            {"db": database},
        )
        return [(str(state), str(query)) for state, query in found]


@pytest.mark.postgres
def test_postgres_read_streams_and_releases_its_connection(pg_url: str) -> None:
    database = pg_url.rsplit("/", 1)[1]
    with writer(pg_url) as eng:
        create_docs(eng)
        with eng.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO docs (id, text) SELECT g, repeat('x', 100) FROM generate_series(1, 50000) g"
                )
            )
        with SqlSource(pg_url, "docs", "id", "text", fetch_rows=500) as src:
            plan = src.plan(shards=1)
            rows = src.read(plan, plan.shards[0])
            first = list(itertools.islice(rows, 10))
            reading = _sessions(eng, database)
            rows.close()
            after = _sessions(eng, database)
    assert [r.key for r in first] == list(range(1, 11))
    # The planning transaction, plus the reader paused on a server-side cursor.
    in_transaction = [query for state, query in reading if state == "idle in transaction"]
    assert len(in_transaction) == 2
    assert any(query.startswith("FETCH FORWARD 500") for query in in_transaction), reading
    assert [s for s, _ in after].count("idle in transaction") == 1  # only the planning transaction


def test_sqlite_read_streams_and_releases_its_lock(sqlite_url: str) -> None:
    with writer(sqlite_url, connect_args={"timeout": 0.05}) as eng:
        create_docs(eng, [(k, "x" * 200) for k in range(ROWS)])
        with SqlSource(sqlite_url, "docs", "id", "text", fetch_rows=500) as src:
            plan = src.plan(shards=1)
            tracemalloc.start()
            try:
                rows = src.read(plan, plan.shards[0])
                first = list(itertools.islice(rows, 10))
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            # An open read holds SQLite's shared lock, so a writer cannot commit...
            with pytest.raises(sa.exc.OperationalError, match="locked"):
                insert(eng, [(-1, "blocked")])
            rows.close()
            insert(eng, [(-2, "free")])  # ...until the generator is closed.
    assert [r.key for r in first] == list(range(10))
    assert peak < 4_000_000  # the whole shard would be over 10 MB of Python strings


def test_reads_run_concurrently_from_threads(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, [(k, f"t{k}") for k in range(2000)])
    with SqlSource(any_url, "docs", "id", "text") as src:
        plan = src.plan(shards=8)
        with ThreadPoolExecutor(max_workers=4) as pool:
            parts = list(pool.map(lambda s: [r.key for r in src.read(plan, s)], plan.shards))
    assert sorted(itertools.chain.from_iterable(parts)) == list(range(2000))
    assert all(part == sorted(part) for part in parts)
