"""How long one query of a SQL source may run: ``--query-timeout SECONDS`` (default 300; 0: no limit).

A ``--where`` filter that passes the checks can still be costly per row
(``length(lpad(text, 30000000)) > 1`` builds 30 MB per row), and a table
without an index may make planning's count and boundary queries slow. With no
limit such a query runs for hours holding a connection, a snapshot and a
worker. So every query a source runs to plan, check or read is limited:

* **PostgreSQL:** ``statement_timeout``, set with ``set_config(...,
  is_local => true)`` (``SET LOCAL``) at the start of each transaction the
  source opens: planning's, each shard read's, each keyed read's and the
  pre-run check's. It ends with the transaction, so a pooled connection keeps
  the server's own setting for anything else. A shard read streams through a
  server-side cursor, so each ``FETCH`` is a statement timed on its own: the
  time the worker spends scoring between fetches never counts.
* **SQLite:** a progress handler on each connection interrupts the query
  once it has run past its deadline. The deadline is set when a statement
  starts and again before each row is pulled from a streamed read, so here
  too only the time spent inside the database counts.

A query stopped so is a :class:`~shardwise.errors.SourceError`, never
retried (the same query would run as long again): the shard, or the
planning, fails with one line naming the limit and how to raise it. A
``statement_timeout`` of the server's own (with ``--query-timeout 0``) is
still the transient error :mod:`shardwise.db.errors` makes of it.

The run records its limit in the plan (``query_timeout_s``). A worker reads
with the limit of the run it works for, so ``--resume`` with a higher
``--query-timeout`` finishes shards that timed out; which rows each shard
holds does not depend on it.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import sqlalchemy as sa

from shardwise.errors import ConfigError, SourceError

__all__ = ["DEFAULT_QUERY_TIMEOUT_S", "QueryLimit", "check_query_timeout"]

DEFAULT_QUERY_TIMEOUT_S = 300.0
"""Five minutes: far more than a planned shard's read or a plan over millions of indexed rows takes,
and far less than a runaway filter would run."""

_CANCELLED = "57014"  # query_canceled: statement_timeout (or a cancel request)
_CLOCK = "shardwise_query_clock"
_STEPS = 1000
"""SQLite virtual-machine steps between two looks at the clock: about a millisecond of work."""

_T = TypeVar("_T")


def check_query_timeout(seconds: object) -> float:
    """``seconds`` as a float, refused unless it is a number of seconds >= 0 (0: no limit)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
        raise ConfigError(
            f"query timeout must be a number of seconds >= 0 (0: no limit); got {seconds!r} "
            f"(the default is {DEFAULT_QUERY_TIMEOUT_S:g})"
        )
    return float(seconds)


class _Clock:
    """One SQLite connection's deadline; its progress handler asks :meth:`expired`."""

    def __init__(self) -> None:
        self.deadline: float | None = None

    def arm(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def expired(self) -> bool:
        """Non-zero from a progress handler makes SQLite interrupt the statement it runs."""
        return self.deadline is not None and time.monotonic() > self.deadline


class QueryLimit:
    """The query timeout of one source's engine: installed once, applied per transaction and per row."""

    def __init__(self, seconds: float) -> None:
        self.seconds = check_query_timeout(seconds)

    def install(self, engine: sa.Engine) -> None:
        """On SQLite, give every connection of ``engine`` its clock and arm it at each statement."""
        if not self.seconds or engine.dialect.name != "sqlite":
            return
        sa.event.listen(engine, "connect", self._on_connect)
        sa.event.listen(engine, "before_cursor_execute", self._on_execute)

    def _on_connect(self, dbapi_conn: sqlite3.Connection, record: Any) -> None:
        clock = _Clock()
        record.info[_CLOCK] = clock
        dbapi_conn.set_progress_handler(clock.expired, _STEPS)

    def _on_execute(self, conn: sa.Connection, *_: Any) -> None:
        self.rearm(conn)

    def begin(self, conn: sa.Connection) -> None:
        """Limit the statements of ``conn``'s current transaction (PostgreSQL; SQLite arms per statement)."""
        if self.seconds and conn.dialect.name == "postgresql":
            millis = max(1, round(self.seconds * 1000))
            conn.execute(sa.select(sa.func.set_config("statement_timeout", str(millis), True)))

    def rearm(self, conn: sa.Connection) -> None:
        """Give the query on ``conn`` the whole limit from now (SQLite)."""
        clock = conn.info.get(_CLOCK)
        if clock is not None:
            clock.arm(self.seconds)

    def rows(self, conn: sa.Connection, rows: Iterable[_T]) -> Iterator[_T]:
        """``rows``, the clock re-armed before each is pulled, so the reader's own time never counts."""
        if conn.info.get(_CLOCK) is None:
            yield from rows
            return
        pulling = iter(rows)
        while True:
            self.rearm(conn)
            try:
                row = next(pulling)
            except StopIteration:
                return
            yield row

    def stopped(self, exc: BaseException) -> bool:
        """Whether ``exc`` is this limit cancelling a query: PostgreSQL's ``statement_timeout``
        (SQLSTATE 57014, not an operator's cancel request), or SQLite's ``interrupted``, which only the
        clocks of this engine call on its connections."""
        if not self.seconds:
            return False
        orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
        if getattr(orig, "sqlstate", None) == _CANCELLED:
            return "statement timeout" in str(orig)
        return isinstance(orig, sqlite3.OperationalError) and "interrupted" in str(orig)

    def error(self, doing: str) -> SourceError:
        """The one line for a query this limit stopped while ``doing``."""
        return SourceError(
            f"{doing} was stopped by the query timeout: a query ran past {self.seconds:g} s "
            "(--query-timeout); a --where filter that is costly per row, or a big table without an index on "
            "the key, is the usual cause: make the filter cheaper, or raise --query-timeout SECONDS "
            "(0: no limit)"
        )
