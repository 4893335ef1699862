"""Watch a PostgreSQL table through LISTEN/NOTIFY: debounced, reconnecting, losing no change.

:class:`PgNotifyWatcher` keeps one autocommit connection that LISTENs on
``shardwise_data`` (the channel of the change triggers, see
:mod:`shardwise.watch.trigger`) and works in steps (:meth:`poll_once`):

* **Debounce.** After the first notification for its table it keeps
  collecting for ``debounce_s``, then announces *one* event: the table, the
  largest key the notifications reported, the rows changed (from the change
  counter, so it is exact even if a notification was missed) and the
  counter's ``seq``. A bulk load of many statements becomes one event.
* **No change lost.** Every (re)connect first LISTENs, then compares the
  table's mark with the last one announced (persisted in
  ``shardwise_watch_state``, see :mod:`shardwise.watch.state`) and
  announces what changed while it was away, UPDATEs included. A change
  committed before LISTEN is in the mark; one committed after it is notified.
  The same check runs every ``check_s`` while idle, which also catches a
  notification lost in any other way and proves the connection is alive.
  With the trigger installed the mark is its change counter; without it, a
  watermark (:class:`~shardwise.watch.marks.WatermarkTracker`), so the
  watcher still catches up on reconnect and hears any NOTIFY on the channel
  that names the table.
* **Reconnects.** A dropped connection or a restarting server raises
  :class:`~shardwise.errors.TransientError` from :meth:`poll_once` and drops
  the connection; :meth:`run` backs off and the next step reconnects (and
  catches up).

Events are emitted before the mark is stored: at least once, never lost.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from contextlib import suppress
from time import monotonic
from typing import Any

import sqlalchemy as sa

from shardwise.db.sqlfiles import query
from shardwise.errors import ConfigError
from shardwise.watch.events import Emitter
from shardwise.watch.loop import Backoff
from shardwise.watch.marks import CounterTracker, WatermarkTracker
from shardwise.watch.pgwire import driver
from shardwise.watch.spec import WatchSpec
from shardwise.watch.table_watcher import TableWatcher
from shardwise.watch.trigger import find_trigger

__all__ = ["CHANNEL", "PgNotifyWatcher"]

CHANNEL = "shardwise_data"
"""The NOTIFY channel of the change triggers (``sql/postgresql/watch_trigger.sql``)."""

_log = logging.getLogger(__name__)


class PgNotifyWatcher(TableWatcher):
    """Announces writes to one PostgreSQL table as ``shardwise.data.landed`` events.

    ``check_s`` is the idle time between mark checks, ``wait_s`` the longest
    :meth:`run` waits for a notification before it looks at ``stop`` again.
    ``spec.updated_at`` only matters without the trigger: it is then the watermark
    column. Not thread-safe: one thread runs :meth:`run` (or :meth:`poll_once`).
    """

    def __init__(
        self,
        spec: WatchSpec,
        emit: Emitter,
        *,
        check_s: float = 30.0,
        wait_s: float = 1.0,
        backoff: Backoff | None = None,
    ) -> None:
        for setting, value in (("check_s", check_s), ("wait_s", wait_s)):
            if not value >= 0:
                raise ConfigError(f"{setting} must be a number of seconds >= 0; got {value!r}")
        super().__init__(spec, emit, pause_s=0.0, backoff=backoff)
        if not self._table.db.is_postgres:
            self._table.db.dispose()
            raise ConfigError(
                f"LISTEN/NOTIFY needs PostgreSQL; {self._table.identity} is {self._table.db.dialect}. "
                "Watch it with a WatermarkPoller instead (mode='poll')"
            )
        self._debounce_s, self._check_s, self._wait_s = spec.debounce_s, check_s, wait_s
        self._conn: sa.Connection | None = None
        self._check_at = 0.0

    @property
    def backend_pid(self) -> int | None:
        """The server process id of the listening connection; None while disconnected."""
        return int(driver(self._conn).info.backend_pid) if self._conn is not None else None

    def poll_once(self, timeout: float | None = None) -> int:
        """Connect if needed, wait up to ``timeout`` (default ``wait_s``) for notifications, check; return
        the events emitted."""
        timeout = self._wait_s if timeout is None else timeout
        doing = f"watching {self._table.identity}"
        try:
            with self._table.db.errors(doing):
                conn = self._conn if self._conn is not None else self._connect()
                notes = self._receive(conn, timeout)
                if notes or monotonic() >= self._check_at:
                    return self._check(conn, notes)
                return 0
        except BaseException:
            self._drop()
            raise

    def run(self, stop: threading.Event) -> None:
        """Watch until ``stop`` is set, reconnecting with backoff after transient errors."""
        try:
            super().run(stop)
        finally:
            self._drop()

    def close(self) -> None:
        """Close the listening connection and the engine's pool."""
        self._drop()
        self._table.db.dispose()

    def _connect(self) -> sa.Connection:
        self._conn = conn = self._table.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(query("postgresql", "watch_listen"))  # first: from here on no commit goes unheard
        watch_schema = find_trigger(conn, self._table)
        self._tracker = (
            CounterTracker(self._table, watch_schema) if watch_schema else WatermarkTracker(self._table)
        )
        if not self._progress.loaded:
            self._progress.load(conn)
        self._check_at = 0.0  # catch up on whatever changed while disconnected
        _log.info("watcher %r listens on %s", self._announce.name, self._table.identity)
        return conn

    def _receive(self, conn: sa.Connection, timeout: float) -> list[dict[str, Any]]:
        """This table's notifications: the first within ``timeout``, then all within ``debounce_s``."""
        listener = driver(conn)
        mine = self._mine(listener.notifies(timeout=timeout, stop_after=1))
        if mine and self._debounce_s > 0:
            mine += self._mine(listener.notifies(timeout=self._debounce_s))
        return mine

    def _mine(self, notes: Iterable[Any]) -> list[dict[str, Any]]:
        found = []
        for note in notes:
            try:
                body = json.loads(note.payload)
            except ValueError:
                _log.debug("ignoring a non-JSON notification on %s: %r", CHANNEL, note.payload)
                continue
            if isinstance(body, dict) and body.get("table") == self._table.label:
                found.append(body)
        return found

    def _check(self, conn: sa.Connection, notes: list[dict[str, Any]]) -> int:
        now = self._tracker.read(conn)
        change = self._tracker.since(conn, self._progress.last, now)
        if change is not None:
            payload = {**self._table.describe(), "mode": self._tracker.kind, **change, **_summary(notes)}
            self._announce(payload)
        self._progress.record(conn, now)
        self._check_at = monotonic() + self._check_s
        return int(change is not None)

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        # Invalidate, not return to the pool: the connection LISTENs, and may be broken.
        with suppress(Exception):
            conn.invalidate()
        with suppress(Exception):
            conn.close()


def _summary(notes: list[dict[str, Any]]) -> dict[str, Any]:
    """What the notifications add: the statements' operations and their largest key."""
    if not notes:
        return {"catch_up": True}
    out: dict[str, Any] = {"catch_up": False, "ops": sorted({str(n.get("op")) for n in notes})}
    keys = [n["max_key"] for n in notes if n.get("max_key") is not None]
    if keys:
        out["max_key"] = max(keys)
    return out
