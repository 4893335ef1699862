"""How long a PostgreSQL connection may wait on the database, and how a hung one fails and is replaced.

"Hung" is two different things, and each needs its own bound:

1. **A statement that does not return**: a lock wait behind another
   session's lock, a slow plan. The server's own timers end it. The ledger's
   and the SQL sink's sessions get ``statement_timeout`` and ``lock_timeout``
   (:func:`bound_engine`, set once per connection as it opens), so the
   statement fails with SQLSTATE 57014 or 55P03: a
   :class:`~shardwise.errors.TransientError` (:mod:`shardwise.db.errors`),
   and the step is tried again on a connection from the pool, under the
   shard's one retry deadline (:mod:`shardwise.retry_policy`).
2. **A connection whose server stops answering**: a frozen server, or a
   network path that swallows the traffic while something in between still
   acknowledges it (a proxy or a NAT that stops forwarding). No server timer
   can fire: the statement may never have reached the server, or its answer
   never comes back. TCP does not notice either: keepalives and libpq's
   ``tcp_user_timeout`` catch a peer that stops *acknowledging*, and the
   proxy's kernel keeps acknowledging. psycopg 3 has no client-side
   statement timeout, and ``cancel()`` sends its request on a new
   connection, down the same dead path. So the client bounds each wait
   itself: every wait of a connection on its socket (a query, a fetch, a
   COPY block, a COMMIT, the pool's ping) is watched, and one longer than
   the *answer bound* (the statement timeout plus a margin, so that a live
   server's own timer always fires first) has its socket shut down by one
   watchdog thread. libpq then reads end-of-file, psycopg raises an
   ``OperationalError`` and marks the connection broken, SQLAlchemy drops it
   from the pool, and the error is transient: the step is tried again on a
   new connection (whose own opening is bounded by ``connect_timeout``).
   ``shutdown()`` rather than ``close()``: it ends the stream but leaves the
   descriptor libpq owns valid, so it cannot hit a descriptor reused
   meanwhile; and the watchdog acts under the lock a wait takes to finish,
   so it never touches a connection that has moved on.

After the client gave up on a stalled connection, its session on the server
may still hold the locks of its open transaction (a proxy that stalls keeps
the server's side of the connection open): ``idle_in_transaction_session_timeout``
(the answer bound) ends it, so the retry on the new connection does not wait
on the old one's locks for ever.

One setting drives all of it: :attr:`~shardwise.retry_policy.RetryPolicy.db_timeout_s`
(default :data:`DEFAULT_DB_TIMEOUT_S`; 0 turns the bounds off). A run records
it in its plan with the rest of its retry policy, so every worker of the run
bounds alike. Long work that must not be cut (an HNSW index build) runs
inside :func:`unbounded`.

Watchers and SQL sources get the answer bound only (:func:`bound_engine` with
``server_timers=False``): a source limits its own queries
(``--query-timeout``, :mod:`shardwise.sources.sql.timeout`), and a watcher's
``count(*)`` over a big table may rightly take minutes.

**SQLite** gets none of this: its lock waits are bounded by its
``busy_timeout`` (``sql/sqlite/pragmas.sql``), after which "database is
locked" is transient, and a statement on a local file cannot hang on a peer;
a file system that hangs blocks inside the kernel, where no client timer
helps.
"""

from __future__ import annotations

import heapq
import itertools
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import sqlalchemy as sa

from shardwise.errors import ConfigError
from shardwise.retry_policy import DEFAULT_DB_TIMEOUT_S

__all__ = [
    "ANSWER_MARGIN_S",
    "CONNECT_TIMEOUT_S",
    "DEFAULT_DB_TIMEOUT_S",
    "answer_bound",
    "bound_engine",
    "check_db_timeout",
    "unbounded",
]

CONNECT_TIMEOUT_S = 10
"""Seconds a new PostgreSQL connection may take to open (libpq's ``connect_timeout``), unless the URL says:
a try at a host that does not answer is cut short, so a retry checks its deadline at least this often."""
ANSWER_MARGIN_S = 10.0
"""How much longer than the statement timeout the client waits for an answer (at most; as much again
for timeouts under it): a live server's own timer fires first, and its error arrives."""

_INFO = "shardwise_db_timeout_s"


def check_db_timeout(seconds: object, what: str = "the database timeout") -> float:
    """``seconds`` as a float, refused unless it is a number of seconds >= 0 (0: no bounds); ``what``
    names the setting in the message."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
        raise ConfigError(f"{what} must be a number of seconds >= 0 (0: no bounds); got {seconds!r}")
    return float(seconds)


def answer_bound(timeout_s: float) -> float | None:
    """How long a wait for the server's answer may last, for a statement timeout of ``timeout_s``;
    None (no bound) for 0."""
    timeout_s = check_db_timeout(timeout_s)
    return timeout_s + min(timeout_s, ANSWER_MARGIN_S) if timeout_s else None


def bound_engine(engine: sa.Engine, timeout_s: float, *, server_timers: bool = True) -> None:
    """Bound every PostgreSQL connection ``engine`` opens from now on (see the module docstring): the
    answer bound always, and with ``server_timers`` the session's statement, lock and idle-in-transaction
    timeouts. Nothing for SQLite, or for ``timeout_s`` 0."""
    timeout_s = check_db_timeout(timeout_s)
    if engine.dialect.name != "postgresql" or not timeout_s:
        return
    answer_s = answer_bound(timeout_s)
    timers = _timers(timeout_s) if server_timers else None

    def do_connect(dialect: Any, record: Any, cargs: Any, cparams: Any) -> psycopg.Connection[Any]:
        conn = _Bounded.connect(*cargs, **cparams)
        conn.answer_s = answer_s
        return conn

    def on_connect(dbapi_conn: Any, record: Any) -> None:
        record.info[_INFO] = timeout_s
        if timers is not None:
            _set_timers(dbapi_conn, timers)
            dbapi_conn.commit()

    sa.event.listen(engine, "do_connect", do_connect)
    sa.event.listen(engine, "connect", on_connect)


@contextmanager
def unbounded(conn: sa.Connection) -> Iterator[None]:
    """Inside the block, ``conn`` has neither bound: for long work that must not be cut (an index build).

    The session's timers go back to the engine's afterwards; a connection whose timers cannot be set back
    is invalidated rather than returned to the pool. Nothing changes for a connection that was not bounded.
    """
    raw = conn.connection.driver_connection
    timeout_s = conn.connection.info.get(_INFO)
    if not isinstance(raw, _Bounded) or timeout_s is None:
        yield
        return
    answer_s, raw.answer_s = raw.answer_s, None
    _set_timers(raw, {name: 0 for name in _timers(timeout_s)})
    try:
        yield
    finally:
        raw.answer_s = answer_s
        try:
            _set_timers(raw, _timers(timeout_s))
        except psycopg.Error:
            conn.invalidate()


def _timers(timeout_s: float) -> dict[str, int]:
    """The session settings, in milliseconds: a statement ends at the timeout, a lock wait in it at half
    (so a lock wait fails as one, SQLSTATE 55P03, naming the lock, not as a slow statement), and a session
    idle in a transaction (its client gone) at the answer bound."""
    answer_s = answer_bound(timeout_s) or 0.0
    return {
        "statement_timeout": max(1, round(timeout_s * 1000)),
        "lock_timeout": max(1, round(timeout_s * 500)),
        "idle_in_transaction_session_timeout": max(1, round(answer_s * 1000)),
    }


def _set_timers(raw: Any, timers: dict[str, int]) -> None:
    """Set the session's ``timers`` (``set_config`` binds the values; SET would not take parameters)."""
    calls = ", ".join("set_config(%s, %s, false)" for _ in timers)
    values = [str(v) for pair in timers.items() for v in pair]
    raw.execute(f"SELECT {calls}", values)  # the names are ours, the values bound: nothing user-typed


class _Bounded(psycopg.Connection[Any]):
    """A psycopg connection whose every wait on its socket is watched by :data:`_WATCHDOG`."""

    answer_s: float | None = None

    def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        if self.answer_s is None:
            return super().wait(gen, *args, **kwargs)
        given = kwargs.get("timeout")  # a caller's own bound (notifies() passes one): wait past it
        seconds = self.answer_s + (given or 0.0)
        with _WATCHDOG.watching(self.pgconn.socket, seconds) as watch:
            try:
                return super().wait(gen, *args, **kwargs)
            except psycopg.OperationalError as exc:
                if not watch.fired:
                    raise
                raise psycopg.OperationalError(
                    f"the database sent no answer for {seconds:g} s (a server that stopped answering, or a "
                    "network path that stopped forwarding), so this connection was closed"
                ) from exc


@dataclass
class _Watch:
    deadline: float
    fd: int
    fired: bool = False
    done: bool = field(default=False, repr=False)


class _Watchdog:
    """One daemon thread per process: shuts down the socket of a wait that ran past its deadline."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Watch]] = []
        self._order = itertools.count()
        self._pid: int | None = None

    @contextmanager
    def watching(self, fd: int, seconds: float) -> Iterator[_Watch]:
        watch = _Watch(time.monotonic() + seconds, fd)
        with self._cond:
            self._start()
            heapq.heappush(self._heap, (watch.deadline, next(self._order), watch))
            if self._heap[0][2] is watch:  # the earliest deadline now: the thread waits for a later one
                self._cond.notify()
        try:
            yield watch
        finally:
            with self._cond:  # from here on the watchdog leaves this socket alone
                watch.done = True

    def _start(self) -> None:
        if self._pid != os.getpid():  # first use in this process
            self._pid = os.getpid()
            threading.Thread(target=self._run, name="shardwise-db-watchdog", daemon=True).start()

    def after_fork(self) -> None:
        """In a forked child: the thread did not cross the fork, and its lock may have been held when it
        happened, so start afresh (the child's first wait starts its own thread)."""
        self._cond, self._heap, self._pid = threading.Condition(), [], None

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                deadline, _, watch = self._heap[0]
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                heapq.heappop(self._heap)
                watch.fired = True
                _shut(watch.fd)


def _shut(fd: int) -> None:
    """End the TCP stream (or Unix socket) behind ``fd`` without closing the descriptor its owner holds."""
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by the peer: the wait ends on its own


_WATCHDOG = _Watchdog()
os.register_at_fork(after_in_child=_WATCHDOG.after_fork)
