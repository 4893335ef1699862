"""Open the store's database: PostgreSQL through psycopg 3, or an SQLite file.

SQLite needs two things to serve shard tasks running in threads: WAL with a
busy timeout (readers and stagers never block on the writer, and writers queue
instead of failing), and explicit transaction control, so that every
transaction that writes shared tables starts with ``BEGIN IMMEDIATE`` and takes
the write lock up front. A deferred transaction that reads and then writes can
fail at once with "database is locked" however long the busy timeout is.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from shardwise.db.errors import safe_url
from shardwise.db.sqlfiles import load_script, load_sql
from shardwise.db.timeouts import CONNECT_TIMEOUT_S, DEFAULT_DB_TIMEOUT_S, bound_engine
from shardwise.errors import ConfigError
from shardwise.secrets.redact import redact, remember
from shardwise.secrets.url_syntax import refuse_unencoded

__all__ = [
    "CONNECT_TIMEOUT_S",
    "brief_waits",
    "database_scheme",
    "is_database_url",
    "make_engine",
    "on_this_host",
    "write_transaction",
]

_IMMEDIATE = "shardwise_immediate"
_DRIVERS = {"postgresql": "postgresql+psycopg", "postgresql+psycopg": "postgresql+psycopg"}
_SQLITE = ("sqlite", "sqlite+pysqlite")


_LEDGER_SCHEMES = ("postgresql", "postgres", "sqlite")


def database_scheme(url: str) -> str | None:
    """The scheme of a URL with ``://`` that is no location (``postgresql+psycopg://`` is
    ``postgresql``); None for a path or an ``s3://``/``file://`` location."""
    if "://" not in url:
        return None
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower()
    return None if scheme in ("s3", "file") else scheme


def on_this_host(url: str) -> bool:
    """Whether only this host reaches the database ``url`` names: an SQLite file (a database server is
    reached from other hosts too)."""
    return database_scheme(url) == "sqlite"


def is_database_url(url: str) -> bool:
    """Whether ``url`` is a SQLAlchemy URL of a database the ledger can live in: PostgreSQL or SQLite."""
    return database_scheme(url) in _LEDGER_SCHEMES


def make_engine(url: str, *, timeout_s: float = DEFAULT_DB_TIMEOUT_S) -> sa.Engine:
    """An engine for ``url``; plain ``postgresql://`` URLs are pointed at psycopg 3.

    On PostgreSQL, each statement may run or wait for a lock ``timeout_s`` seconds, and a connection whose
    server stops answering is given up a little later (:mod:`shardwise.db.timeouts`; 0: no bounds).
    A URL whose password is not percent-encoded is refused unread (:mod:`shardwise.secrets.url_syntax`).
    """
    refuse_unencoded(url, "the results or ledger database URL")
    try:
        parsed = sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError) as exc:  # ValueError: a port that is no number
        raise ConfigError(
            f"results database URL {redact(url)!r} is not a URL; use postgresql+psycopg://user@host/db "
            "or sqlite:///path/to/file.db"
        ) from exc
    remember(parsed.password)  # masked in every later message, however the driver spells it
    if parsed.drivername in _DRIVERS:
        # A try at a host that does not answer is cut short, so a shard's retries check their
        # deadline (shardwise.retry_policy) at least this often; a URL's own connect_timeout wins.
        waits = {} if "connect_timeout" in parsed.query else {"connect_timeout": CONNECT_TIMEOUT_S}
        engine = sa.create_engine(
            parsed.set(drivername=_DRIVERS[parsed.drivername]),
            pool_pre_ping=True,
            pool_size=8,
            max_overflow=24,
            connect_args=waits,
        )
        bound_engine(engine, timeout_s)
        return engine
    if parsed.drivername in _SQLITE:
        if parsed.database in (None, "", ":memory:") or "mode=memory" in str(parsed.query):
            raise ConfigError(
                f"results database {safe_url(parsed)} is in memory; the store needs one database "
                "shared by several connections. Use a file: sqlite:///path/to/results.db"
            )
        return _sqlite_engine(parsed)
    raise ConfigError(
        f"results database driver {parsed.drivername!r} is not supported ({safe_url(parsed)}); "
        "use postgresql+psycopg:// (psycopg 3) or sqlite:///"
    )


def _sqlite_engine(url: sa.URL) -> sa.Engine:
    engine = sa.create_engine(url, connect_args={"timeout": 60.0, "check_same_thread": False})

    @sa.event.listens_for(engine, "connect")
    def _configure(dbapi_conn: Any, _record: Any) -> None:
        # The driver's own transaction handling would emit a deferred BEGIN behind
        # our back; turn it off and begin explicitly in _begin below.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        try:
            for stmt in load_script("sqlite", "pragmas"):
                _pragma(cursor, stmt)
        finally:
            cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_IMMEDIATE) else "BEGIN")

    return engine


def _pragma(cursor: Any, stmt: str, tries: int = 50) -> None:
    """Run one pragma; switching a new file to WAL can meet "database is locked" without waiting.

    SQLite does not call the busy handler for every lock a journal-mode change
    needs, so several connections opening a new database at once may see
    SQLITE_BUSY at once: wait a moment and try again.
    """
    for attempt in range(tries):
        try:
            cursor.execute(stmt)
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == tries - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


@contextmanager
def write_transaction(conn: sa.Connection) -> Iterator[sa.RootTransaction]:
    """A transaction that writes shared tables: ``BEGIN IMMEDIATE`` on SQLite, a plain one on PostgreSQL.

    Commits when the block ends, rolls back on an exception; the block may also
    roll back early through the yielded transaction.
    """
    conn.execution_options(**{_IMMEDIATE: True})
    try:
        with conn.begin() as tx:
            yield tx
    finally:
        conn.execution_options(**{_IMMEDIATE: False})


@contextmanager
def brief_waits(conn: sa.Connection) -> Iterator[None]:
    """Inside the block, an SQLite write waits only a moment for the write lock (busy_brief.sql).

    For writes that may be skipped, such as live progress: a busy database
    raises "database is locked" (a :class:`~shardwise.errors.TransientError`
    once mapped) instead of queueing behind a merge. The connection's usual
    busy_timeout comes back afterwards; a connection that cannot be reset is
    invalidated rather than returned to the pool. PostgreSQL: no change.
    """
    if conn.dialect.name != "sqlite":
        yield
        return
    raw = conn.connection.driver_connection
    assert raw is not None
    # Straight on the driver's connection: it is in autocommit mode, and a pragma run
    # through SQLAlchemy would open a transaction before the block's BEGIN IMMEDIATE.
    raw.execute(load_sql("sqlite", "busy_brief"))
    try:
        yield
    finally:
        try:
            raw.execute(_patient())
        except sqlite3.Error:
            conn.invalidate()


def _patient() -> str:
    """pragmas.sql's busy_timeout statement: the wait every other write gets."""
    return next(stmt for stmt in load_script("sqlite", "pragmas") if "busy_timeout" in stmt)
