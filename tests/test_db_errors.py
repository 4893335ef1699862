"""One classifier: a real database error is the same Shardwise error in the store, sources and watchers.

Each test makes one failure happen for real (a lock timeout, a terminated
backend, a locked SQLite file ...) six times: under each layer's entry point
(the store's and ledger's :func:`~shardwise.db.errors.mapped_errors`, a
source's :meth:`~shardwise.sources.sql.db.Database.errors`, and the same
``Database.errors`` as a watcher holds it), once through SQLAlchemy and once
straight from the driver, as the store's COPY and a watcher's LISTEN and DDL
meet them. All six must be the same class, with a message that says the
action, where (password hidden), the driver's first line and the fix.
"""

from __future__ import annotations

import socket
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from shardwise.db.errors import mapped_errors, safe_url
from shardwise.errors import ConfigError, ShardwiseError, SourceError, TransientError
from shardwise.sources.sql.db import Database

ACTION = "doing the thing"
PASSWORD = "s3cret-pw"  # trust auth ignores it; it must never reach a message
Run = Callable[[str], Any]


@contextmanager
def _database_errors(url: str) -> Iterator[None]:
    db = Database(url)
    try:
        with db.errors(ACTION):
            yield
    finally:
        db.dispose()


LAYERS: dict[str, Callable[[str], AbstractContextManager[None]]] = {
    "results": lambda url: mapped_errors(ACTION, url),
    "sources": _database_errors,
    # Watchers have no mapper of their own: PgNotifyWatcher, WatermarkPoller and the trigger DDL
    # map through their WatchedTable's Database.errors, raw psycopg errors (raw=True) included.
    "watchers": _database_errors,
}


@contextmanager
def _session(url: str, raw: bool) -> Iterator[Run]:
    """A new connection to ``url``; yields ``run(sql)`` -> first value. ``raw``: the driver, no SQLAlchemy."""
    parsed = sa.make_url(url)
    sqlite = parsed.drivername == "sqlite"
    if raw:
        conn: Any = (
            sqlite3.connect(parsed.database or "", timeout=0.05, isolation_level=None)
            if sqlite
            else psycopg.connect(parsed.set(drivername="postgresql").render_as_string(hide_password=False))
        )
    else:
        engine = sa.create_engine(
            parsed, poolclass=NullPool, connect_args={"timeout": 0.05} if sqlite else {}
        )
        conn = engine.connect()

    def run(sql: str) -> Any:
        if isinstance(conn, sa.Connection):
            result = conn.exec_driver_sql(sql)
            return result.scalar() if result.returns_rows else None
        cursor = conn.execute(sql)
        row = cursor.fetchone() if cursor.description else None
        return row[0] if row else None

    try:
        yield run
    finally:
        conn.close()


def _same_everywhere(url: str, fire: Callable[[Run], None], expected: type[ShardwiseError]) -> None:
    """Fire the failure under every layer, SQLAlchemy-wrapped and raw; each must map to ``expected``."""
    for layer, enter in LAYERS.items():
        for raw in (False, True):
            with pytest.raises(ShardwiseError) as info, enter(url), _session(url, raw) as run:
                fire(run)
            _check(info.value, url, expected, f"{layer}, raw={raw}")


def _check(got: ShardwiseError, url: str, expected: type[ShardwiseError], path: str) -> None:
    assert type(got) is expected, f"{path}: {type(got).__name__}: {got}"
    cause = got.__cause__
    driver = cause.orig if isinstance(cause, sa.exc.DBAPIError) else cause
    first_line = str(driver).strip().splitlines()[0].replace(PASSWORD, "***")
    message = str(got)
    assert message.startswith(f"{ACTION} at {safe_url(url)} failed: {first_line}"), f"{path}: {message}"
    assert PASSWORD not in message and message.split("; ", 1)[1], f"{path}: {message}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# PostgreSQL ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg(pg_module_url: str) -> str:
    """A database with one row to fight over; the URL carries a password."""
    engine = sa.create_engine(pg_module_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL)")
        conn.exec_driver_sql("INSERT INTO t VALUES (1, 0)")
    engine.dispose()
    return pg_module_url.replace("root@", f"root:{PASSWORD}@")


@pytest.fixture
def admin(pg_module_url: str) -> Iterator[sa.Connection]:
    engine = sa.create_engine(pg_module_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with engine.connect() as conn:
        yield conn


@pytest.mark.postgres
def test_a_lock_timeout_is_transient(pg: str, admin: sa.Connection) -> None:
    def fire(run: Run) -> None:
        run("SET lock_timeout = '50ms'")
        run("SELECT n FROM t FOR UPDATE")  # 55P03: lock not available

    admin.exec_driver_sql("BEGIN")
    admin.exec_driver_sql("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
    try:
        _same_everywhere(pg, fire, TransientError)
    finally:
        admin.exec_driver_sql("ROLLBACK")


@pytest.mark.postgres
def test_a_row_locked_nowait_is_transient(pg: str, admin: sa.Connection) -> None:
    admin.exec_driver_sql("BEGIN")
    admin.exec_driver_sql("SELECT n FROM t WHERE id = 1 FOR UPDATE")
    try:
        _same_everywhere(pg, lambda run: run("SELECT n FROM t FOR UPDATE NOWAIT"), TransientError)
    finally:
        admin.exec_driver_sql("ROLLBACK")


@pytest.mark.postgres
def test_a_statement_timeout_is_transient(pg: str) -> None:
    def fire(run: Run) -> None:
        run("SET statement_timeout = '10ms'")
        run("SELECT pg_sleep(1)")  # 57014: query canceled

    _same_everywhere(pg, fire, TransientError)


@pytest.mark.postgres
def test_a_terminated_backend_is_transient(pg: str, admin: sa.Connection) -> None:
    def fire(run: Run) -> None:
        pid = run("SELECT pg_backend_pid()")
        admin.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)}, 5000)")
        run("SELECT 1")  # 57P01, or the connection found closed

    _same_everywhere(pg, fire, TransientError)


@pytest.mark.postgres
def test_a_serialization_failure_is_transient(pg: str, admin: sa.Connection) -> None:
    def fire(run: Run) -> None:
        run("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        run("SELECT n FROM t WHERE id = 1")  # the snapshot is taken here
        admin.exec_driver_sql("UPDATE t SET n = n + 1 WHERE id = 1")
        run("UPDATE t SET n = n + 1 WHERE id = 1")  # 40001

    _same_everywhere(pg, fire, TransientError)


@pytest.mark.postgres
def test_an_unknown_database_is_a_config_error(pg: str) -> None:
    url = pg.rsplit("/", 1)[0] + "/no_such_database_here"  # 3D000, reported at connect
    _same_everywhere(url, lambda run: None, ConfigError)


@pytest.mark.postgres
def test_a_missing_table_is_a_source_error(pg: str) -> None:
    _same_everywhere(pg, lambda run: run("SELECT * FROM no_such_table"), SourceError)  # 42P01


def test_a_refused_connection_is_transient() -> None:
    url = f"postgresql+psycopg://root:{PASSWORD}@127.0.0.1:{_free_port()}/db"
    _same_everywhere(url, lambda run: None, TransientError)


# SQLite ----------------------------------------------------------------------------------------


@pytest.fixture
def sqlite_db(sqlite_url: str) -> str:
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER)")
    return sqlite_url


def test_a_locked_sqlite_database_is_transient(sqlite_db: str) -> None:
    blocker = sqlite3.connect(sqlite_db.removeprefix("sqlite:///"), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:  # the session's busy timeout is 50 ms
        _same_everywhere(sqlite_db, lambda run: run("INSERT INTO t (n) VALUES (1)"), TransientError)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_an_sqlite_file_that_cannot_open_is_a_config_error(tmp_path: Path) -> None:
    _same_everywhere(f"sqlite:///{tmp_path / 'missing' / 'x.db'}", lambda run: None, ConfigError)


def test_a_missing_sqlite_table_is_a_source_error(sqlite_db: str) -> None:
    _same_everywhere(sqlite_db, lambda run: run("SELECT * FROM no_such_table"), SourceError)


def test_an_empty_connection_pool_is_transient(sqlite_db: str) -> None:
    engine = sa.create_engine(sqlite_db, pool_size=1, max_overflow=0, pool_timeout=0.01)
    try:
        with engine.connect():
            for layer, enter in LAYERS.items():
                with (
                    pytest.raises(TransientError, match="no free connection in the pool") as info,
                    enter(sqlite_db),
                ):
                    engine.connect()
                assert isinstance(info.value.__cause__, sa.exc.TimeoutError), layer
    finally:
        engine.dispose()


def test_what_the_table_does_not_classify_is_the_layers_call(sqlite_db: str) -> None:
    # A duplicate key: a bug in the store's own SQL (propagates), the source's filter or table otherwise.
    def fire(run: Run) -> None:
        run("INSERT INTO t (id, n) VALUES (1, 0)")
        run("INSERT INTO t (id, n) VALUES (1, 0)")

    for raw in (False, True):
        unchanged = pytest.raises((sa.exc.IntegrityError, sqlite3.IntegrityError))
        with unchanged, LAYERS["results"](sqlite_db), _session(sqlite_db, raw) as run:
            fire(run)
        for layer in ("sources", "watchers"):
            with (
                pytest.raises(SourceError) as info,
                LAYERS[layer](sqlite_db),
                _session(sqlite_db, raw) as run,
            ):
                fire(run)
            assert "UNIQUE constraint failed" in str(info.value), layer
