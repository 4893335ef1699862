"""Map psycopg, sqlite3 and SQLAlchemy errors onto :mod:`shardwise.errors` at the store's boundary.

Transient: dropped connections, serialisation failures, deadlocks, lock
timeouts, SQLite's "database is locked", an exhausted connection pool.
Config: a database that does not exist, failed authentication, a missing
schema, missing privileges. Anything else is a bug and propagates unchanged.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import sqlalchemy as sa

from shardwise.errors import ConfigError, ShardwiseError, TransientError

__all__ = ["classify", "mapped_errors", "safe_url"]

_TRANSIENT_SQLSTATES = ("08", "40", "53", "55P03", "57P")
_CONFIG_SQLSTATES = ("28", "3D000", "3F000", "42501")
_CONFIG_CONNECT_MESSAGES = (
    "does not exist",
    "authentication failed",
    "no password supplied",
    "no pg_hba.conf",
)


def safe_url(url: str | sa.URL) -> str:
    """The URL for messages and logs, password hidden."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "<unparseable database URL>"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def classify(exc: BaseException, action: str, where: str) -> ShardwiseError | None:
    """The Shardwise error for a database error, or None when it is not ours to map.

    ``exc`` is a SQLAlchemy error wrapping the driver's, or a driver error
    raised directly (the PostgreSQL COPY path uses psycopg's cursor itself).
    """
    if isinstance(exc, sa.exc.TimeoutError):  # the connection pool ran dry
        return TransientError(f"{action} at {where}: no free database connection ({exc}); retry later")
    invalidated = isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
    detail = _first_line(orig)
    if isinstance(orig, psycopg.Error):
        return _classify_psycopg(orig, invalidated, action, where, detail)
    if isinstance(orig, sqlite3.OperationalError):
        lowered = detail.lower()
        if "locked" in lowered or "busy" in lowered:
            return TransientError(
                f"{action} at {where}: {detail}; another writer held the database past busy_timeout, retry"
            )
        if "unable to open" in lowered or "unknown database" in lowered:
            return ConfigError(
                f"{action} at {where}: {detail}; check the path in the SQLite URL "
                "(SQLite knows only the 'main' schema unless databases are attached)"
            )
        return None
    if invalidated:
        return TransientError(f"{action} at {where}: {detail}; the connection dropped, retry")
    return None


def _classify_psycopg(
    orig: psycopg.Error, invalidated: bool, action: str, where: str, detail: str
) -> ShardwiseError | None:
    state = orig.sqlstate or ""
    # Errors raised while connecting carry no SQLSTATE; the server's FATAL text tells them apart.
    refused = not state and any(m in detail for m in _CONFIG_CONNECT_MESSAGES)
    if refused or state.startswith(_CONFIG_SQLSTATES):
        return ConfigError(
            f"{action} at {where}: {detail} (SQLSTATE {state or 'none'}); check the database URL, "
            "that the database and schema exist, and the user's privileges"
        )
    if (
        invalidated
        or state.startswith(_TRANSIENT_SQLSTATES)
        or (not state and isinstance(orig, psycopg.OperationalError))
    ):
        return TransientError(f"{action} at {where}: {detail}; this may pass on retry")
    return None


@contextmanager
def mapped_errors(action: str, url: str | sa.URL) -> Iterator[None]:
    """Re-raise database errors inside the block as Shardwise errors, keeping the cause."""
    try:
        yield
    except (sa.exc.DBAPIError, sa.exc.TimeoutError, psycopg.Error, sqlite3.Error) as exc:
        mapped = classify(exc, action, safe_url(url))
        if mapped is None:
            raise
        raise mapped from exc
