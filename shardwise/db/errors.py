"""The one table that maps database errors onto :mod:`shardwise.errors`, for every layer.

SQL sources (:meth:`shardwise.sources.sql.db.Database.errors`), the results
store and ledger (:func:`mapped_errors`) and the watchers (which go through
their source's ``Database``) all classify here, so a lock timeout is
transient whether a source, the store or a watcher meets it. Errors arrive
wrapped by SQLAlchemy or straight from the driver (psycopg's COPY, LISTEN
and composed DDL); both are read the same way::

    what the database said                               class           why
    ──────────────────────────────────────────────────── ─────────────── ──────────────────────────────
    SQLSTATE 08xxx connection exception                  TransientError  a new connection may work
    SQLSTATE 40xxx serialisation failure (40001),        TransientError  the transaction may pass
                   deadlock (40P01)                                      when run again
    SQLSTATE 53xxx insufficient resources                TransientError  the server may have room later
    SQLSTATE 55P03 lock not available (lock_timeout,     TransientError  the lock holder finishes
                   NOWAIT)
    SQLSTATE 57014 statement timeout, query cancelled    TransientError  a calmer server may finish it
    SQLSTATE 57xxx operator intervention: terminated     TransientError  the server comes back
                   backend or shutdown (57P01, 57P02),
                   starting up (57P03)
    psycopg, no SQLSTATE: refused, reset, "server        TransientError  a new connection may work
      closed the connection unexpectedly", closed
    SQLAlchemy pool timeout; connection_invalidated      TransientError  a connection frees up / reconnects
    SQLite "locked" or "busy", "disk I/O error"          TransientError  the other writer finishes
    SQLSTATE 28xxx invalid authorisation                 ConfigError     fix the URL or the role
    SQLSTATE 3D000 unknown database                      ConfigError     fix the URL
    SQLSTATE 3F000 unknown schema                        ConfigError     fix the schema setting
    SQLSTATE 42501 insufficient privilege                ConfigError     grant it, or use another role
    psycopg, no SQLSTATE, at connect: "does not exist",  ConfigError     fix the URL or the role
      "authentication failed", "no password supplied",
      "no pg_hba.conf"
    SQLite "unable to open", "unknown database"          ConfigError     fix the path or the schema
    SQLSTATE 42P01 / 42703 undefined table / column      SourceError     name what the database holds
    SQLite "no such table", "no such column"             SourceError     name what the database holds
    anything else                                        not ours        see ``otherwise``

Not ours: :func:`mapped_errors` re-raises the error unchanged, a bug in the
store's own SQL; sources and watchers pass ``otherwise=SourceError``, since
their SQL carries an operator's table, columns and filter.

A message says the action, where (the URL, password hidden), the driver's
first line with its SQLSTATE, and the fix, for example
``merge shard 3 at postgresql+psycopg://app:***@db/prod failed: canceling
statement due to lock timeout (SQLSTATE 55P03); another transaction held the
lock past lock_timeout; this may pass on a retry``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
import sqlalchemy as sa

from shardwise.errors import ConfigError, ShardwiseError, SourceError, TransientError

__all__ = ["classify", "mapped_errors", "safe_url", "without_secrets"]

_RETRY = "this may pass on a retry"
_CHECK_URL = "check the database URL, that the database and schema exist, and the user's privileges"
_CHECK_NAMES = "check the table and column names (and the filter) against the database"
_REFUSED = "the database refused it: check the table, the columns and the filter"
_SECRET_QUERY_KEYS = ("password", "secret", "token", "sslkey")

_Rule = tuple[tuple[str, ...], type[ShardwiseError], str]

_SQLSTATES: tuple[_Rule, ...] = (
    (("08",), TransientError, f"the connection failed; {_RETRY}"),
    (("40",), TransientError, f"the transaction lost a serialisation conflict or a deadlock; {_RETRY}"),
    (("53",), TransientError, f"the server is short of connections, memory or disk; {_RETRY}"),
    (("55P03",), TransientError, f"another transaction held the lock past lock_timeout; {_RETRY}"),
    (("57014",), TransientError, f"{_RETRY}; if it keeps happening, raise statement_timeout"),
    (("57",), TransientError, f"the server ended the connection or is restarting; {_RETRY}"),
    (("28", "3D000", "3F000", "42501"), ConfigError, _CHECK_URL),
    (("42P01", "42703"), SourceError, _CHECK_NAMES),
)
"""First match wins: a full code before the class it belongs to."""

_PSYCOPG_CONNECT: tuple[_Rule, ...] = (
    (
        ("does not exist", "authentication failed", "no password supplied", "no pg_hba.conf"),
        ConfigError,
        _CHECK_URL,
    ),
)
"""psycopg errors without a SQLSTATE come from connecting; the server's FATAL text tells them apart."""

_SQLITE: tuple[_Rule, ...] = (
    (("locked", "busy"), TransientError, f"another connection held the database past busy_timeout; {_RETRY}"),
    (("disk i/o error",), TransientError, _RETRY),
    (
        ("unable to open", "unknown database"),
        ConfigError,
        "check the path in the SQLite URL "
        "(SQLite knows only the 'main' schema unless databases are attached)",
    ),
    (("no such table", "no such column"), SourceError, _CHECK_NAMES),
)
"""SQLite (and any driver without a SQLSTATE) says what happened in words only."""

_POOL_EMPTY: _Rule = ((), TransientError, f"no free connection in the pool; {_RETRY}")
_CONNECTION_LOST: _Rule = ((), TransientError, f"the connection failed or dropped; {_RETRY}")


def without_secrets(url: sa.URL, *, keep_password: bool = False) -> sa.URL:
    """``url`` without query parameters whose names look secret, and without its password unless
    ``keep_password`` (for a rendering that hides it)."""
    secret = [k for k in url.query if any(s in k.lower() for s in _SECRET_QUERY_KEYS)]
    bare = url.difference_update_query(secret)
    if keep_password:
        return bare
    # URL.set(password=None) would keep the password: None means "unchanged" there.
    return sa.URL.create(
        bare.drivername, bare.username, None, bare.host, bare.port, bare.database, bare.query
    )


def safe_url(url: str | sa.URL) -> str:
    """The URL for messages and logs, by the parser: password hidden, secret-looking query keys left out."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        return "<unparseable database URL>"
    return without_secrets(parsed, keep_password=True).render_as_string(hide_password=True)


def classify(
    exc: BaseException, action: str, url: str | sa.URL, *, otherwise: type[ShardwiseError] | None = None
) -> ShardwiseError | None:
    """The Shardwise error for a database error by the table above; ``otherwise`` (or None) if not ours.

    ``exc`` is a SQLAlchemy error wrapping the driver's, or a driver error
    raised directly. ``url`` is where it happened; its password never reaches
    the message, even where the driver echoed it.
    """
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
    detail = _scrub(_first_line(orig), url)
    rule = _rule(exc, orig, detail)
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate:
        detail = f"{detail} (SQLSTATE {sqlstate})"
    if rule is None:
        if otherwise is None:
            return None
        rule = ((), otherwise, _REFUSED)
    _, kind, fix = rule
    return kind(f"{action} at {safe_url(url)} failed: {detail}; {fix}")


@contextmanager
def mapped_errors(
    action: str, url: str | sa.URL, *, otherwise: type[ShardwiseError] | None = None
) -> Iterator[None]:
    """Re-raise database errors inside the block as Shardwise errors, keeping the cause.

    One the table does not classify is re-raised unchanged, or raised as
    ``otherwise`` when that is given.
    """
    try:
        yield
    except (sa.exc.SQLAlchemyError, psycopg.Error, sqlite3.Error) as exc:
        mapped = classify(exc, action, url, otherwise=otherwise)
        if mapped is None:
            raise
        raise mapped from exc


def _rule(exc: BaseException, orig: BaseException, detail: str) -> _Rule | None:
    if isinstance(exc, sa.exc.TimeoutError):  # the connection pool ran dry
        return _POOL_EMPTY
    sqlstate = getattr(orig, "sqlstate", None)
    rule: _Rule | None = None
    if isinstance(sqlstate, str) and sqlstate:
        rule = _match(sqlstate, _SQLSTATES, str.startswith)
    elif isinstance(orig, psycopg.Error):
        rule = _match(detail, _PSYCOPG_CONNECT, str.__contains__)
        if rule is None and isinstance(orig, psycopg.OperationalError):
            rule = _CONNECTION_LOST
    elif isinstance(orig, sqlite3.Error) or isinstance(exc, sa.exc.DBAPIError):
        rule = _match(detail.lower(), _SQLITE, str.__contains__)
    if rule is None and isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        rule = _CONNECTION_LOST
    return rule


def _match(key: str, rules: tuple[_Rule, ...], hit: Callable[[str, str], bool]) -> _Rule | None:
    return next((rule for rule in rules if any(hit(key, part) for part in rule[0])), None)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _scrub(text: str, url: str | sa.URL) -> str:
    """``text`` with the URL's password masked, in case the driver echoed it."""
    try:
        password = sa.make_url(url).password
    except sa.exc.ArgumentError:
        return text
    return text.replace(str(password), "***") if password else text
