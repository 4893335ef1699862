"""The database behind a SQL source: one engine, a password-free identity, and error mapping.

Every SQLAlchemy or driver error a SQL source or a watcher meets passes
through :meth:`Database.errors`, which maps it onto :mod:`shardwise.errors`
with ``raise ... from exc`` by the table in :mod:`shardwise.db.errors`, the
one the results store uses too. A URL whose password is not percent-encoded is
refused before it is parsed (:mod:`shardwise.secrets.url_syntax`). What that table does not classify (a broken
filter, a write refused by a read-only transaction) is a
:class:`SourceError`. The password in the URL is removed from every message
and from the identity.

SQLite connections get ``PRAGMA query_only`` on connect: a source only
reads, so an operator's filter cannot write. (The input fingerprint's SQL
function is registered by :mod:`shardwise.sources.sql.fingerprint`.)
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

from shardwise.db.errors import mapped_errors, without_secrets
from shardwise.db.timeouts import CONNECT_TIMEOUT_S, bound_engine
from shardwise.errors import ConfigError, SourceError
from shardwise.secrets.url_syntax import refuse_unencoded
from shardwise.sources.sql.timeout import QueryLimit

__all__ = ["Database"]


def _on_sqlite_connect(dbapi_conn: sqlite3.Connection, _record: object) -> None:
    dbapi_conn.execute("PRAGMA query_only = ON")


def _parse_url(url: str) -> URL:
    refuse_unencoded(url, "the source database URL")
    try:
        parsed = make_url(url)
    except (sa.exc.ArgumentError, ValueError) as exc:  # ValueError: a port that is no number
        raise ConfigError(
            "the source URL must be a SQLAlchemy URL such as postgresql+psycopg://user@host/db or "
            "sqlite:///path/to.db; could not parse the one given (not echoed: it may hold a password)"
        ) from exc
    if parsed.drivername == "postgresql":
        # psycopg 3 is the PostgreSQL driver Shardwise ships with; psycopg2 is not installed.
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _identity_url(url: URL) -> str:
    """The URL without its password or secret-looking query parameters; an SQLite file by its absolute
    path, so that a relative URL and its absolute form name one database (as a Parquet source's path)."""
    file = url.database or ""
    if url.get_backend_name() == "sqlite" and file and file != ":memory:" and not file.startswith("file:"):
        url = url.set(database=os.path.abspath(file))
    return without_secrets(url).render_as_string(hide_password=False)


LEAST_ANSWER_S = 2.0
"""The least time a query limit waits for the server's answer (plus its margin): a limit of 0.3 s is
the server's to enforce, and a loaded server's answer that it stopped the query may come after 0.6 s;
only a server silent for longer is taken for gone (a transient failure, not the limit's)."""


class Database:
    """One SQLAlchemy engine shared by every read of a source; connections come from its pool.

    On PostgreSQL a connection whose server stops answering is given up a little after
    ``answer_timeout_s`` (by default the query timeout, at least :data:`LEAST_ANSWER_S`; 0: never)
    and the read fails as transient
    (:mod:`shardwise.db.timeouts`: the answer bound only; the query timeout is the source's own
    server-side limit). A new connection may take :data:`~shardwise.db.timeouts.CONNECT_TIMEOUT_S` to
    open unless the URL says otherwise.
    """

    def __init__(
        self, url: str, query_timeout_s: float = 0, *, answer_timeout_s: float | None = None
    ) -> None:
        self.limit = QueryLimit(query_timeout_s)
        """How long one query may run (:mod:`shardwise.sources.sql.timeout`); 0: no limit."""
        self.url = _parse_url(url)
        self._password = self.url.password
        waits = {}
        if self.url.drivername == "postgresql+psycopg" and "connect_timeout" not in self.url.query:
            waits = {"connect_timeout": CONNECT_TIMEOUT_S}
        try:
            self.engine = sa.create_engine(self.url, pool_pre_ping=True, connect_args=waits)
        except (sa.exc.ArgumentError, ImportError) as exc:
            raise ConfigError(
                f"cannot open a {self.url.drivername!r} URL ({self.scrub(str(exc))}); use "
                "postgresql+psycopg://user@host/db for PostgreSQL or sqlite:///path/to.db for SQLite"
            ) from exc
        self.dialect = self.engine.dialect.name
        if self.dialect == "sqlite":
            sa.event.listen(self.engine, "connect", _on_sqlite_connect)
        self.limit.install(self.engine)
        if answer_timeout_s is None:  # the server stops a query at the limit and says so, late when loaded
            answer_timeout_s = max(self.limit.seconds, LEAST_ANSWER_S) if self.limit.seconds else 0.0
        bound_engine(self.engine, answer_timeout_s, server_timers=False)

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    def identity(self, schema: str, table: str) -> str:
        """``<url without password>#<schema>.<table>``: where the rows come from, safe to store."""
        return f"{_identity_url(self.url)}#{schema}.{table}"

    def scrub(self, message: str) -> str:
        """The message with the URL's password replaced, in case a driver echoed it."""
        if self._password:
            message = message.replace(str(self._password), "***")
        return message

    @contextmanager
    def errors(self, doing: str) -> Iterator[None]:
        """Map driver and SQLAlchemy errors raised inside the block onto the Shardwise tree.

        A source's SQL carries an operator's table, columns and filter, so an
        error :mod:`shardwise.db.errors` does not classify is a :class:`SourceError`.
        A query the query timeout stopped is a :class:`SourceError` naming the limit
        (:meth:`~shardwise.sources.sql.timeout.QueryLimit.error`), never a transient one.
        """
        with mapped_errors(doing, self.url, otherwise=SourceError):
            try:
                yield
            except (sa.exc.SQLAlchemyError, psycopg.Error, sqlite3.Error) as exc:
                if self.limit.stopped(exc):
                    raise self.limit.error(doing) from exc
                raise

    def dispose(self) -> None:
        """Close the pooled connections. The engine stays usable; it reconnects on demand."""
        self.engine.dispose()
