"""Watch a SQL table without a trigger: poll a watermark every ``interval_s``.

:class:`WatermarkPoller` reads ``max(column)`` and ``count(*)`` (see
:class:`~shardwise.watch.marks.WatermarkTracker`); the column is the key, or
an ``updated_at`` column when one is given, which also catches UPDATEs.
When either moved it announces the table, the new maximum and the rows past
the previous watermark. Works on PostgreSQL and SQLite.

The last watermark is stored in ``shardwise_watch_state`` in the watched
database, so a restarted poller announces what landed while it was down. On
SQLite that write goes through an engine of its own: the source engine's
connections are ``query_only``.
"""

from __future__ import annotations

import sqlalchemy as sa

from shardwise.watch.events import Emitter
from shardwise.watch.loop import Backoff
from shardwise.watch.spec import WatchSpec
from shardwise.watch.table_watcher import TableWatcher

__all__ = ["WatermarkPoller"]


class WatermarkPoller(TableWatcher):
    """Announces a table's watermark moving as ``shardwise.data.landed`` events. Not thread-safe."""

    def __init__(self, spec: WatchSpec, emit: Emitter, *, backoff: Backoff | None = None) -> None:
        super().__init__(spec, emit, pause_s=spec.interval_s, backoff=backoff)
        db = self._table.db
        self._state = db.engine if db.is_postgres else sa.create_engine(db.url, connect_args={"timeout": 30})

    def poll_once(self) -> int:
        """Read the watermark once and announce it if it moved; returns the events emitted (0 or 1)."""
        db = self._table.db
        with db.errors(f"polling {self._table.identity}"):
            if not self._progress.loaded:
                with self._state.begin() as conn:
                    self._progress.load(conn)
            with db.engine.connect() as conn:
                now = self._tracker.read(conn)
                change = self._tracker.since(conn, self._progress.last, now)
            if change is not None:
                self._announce({**self._table.describe(), "mode": self._tracker.kind, **change})
            with self._state.begin() as conn:
                self._progress.record(conn, now)
        return int(change is not None)

    def close(self) -> None:
        """Close the pooled connections."""
        if self._state is not self._table.db.engine:
            self._state.dispose()
        self._table.db.dispose()
