"""What the watchers of one SQL table share: the table, opened and checked from the watch spec.

:class:`~shardwise.watch.poller.WatermarkPoller` polls its watermark and
:class:`~shardwise.watch.pg_notify.PgNotifyWatcher` hears its change trigger;
both open the table the same way, follow its watermark with a
:class:`~shardwise.watch.marks.WatermarkTracker` unless they know better, and
keep the watch's progress under the watcher's name.
"""

from __future__ import annotations

from shardwise.watch.events import Emitter
from shardwise.watch.loop import Backoff
from shardwise.watch.marks import Tracker, WatermarkTracker
from shardwise.watch.spec import WatchSpec
from shardwise.watch.state import WatchState
from shardwise.watch.table import open_table
from shardwise.watch.watcher import Watcher

__all__ = ["TableWatcher"]


class TableWatcher(Watcher):
    """A watcher of the SQL table ``spec`` names; it owns the table's database (``close`` disposes it)."""

    def __init__(self, spec: WatchSpec, emit: Emitter, *, pause_s: float, backoff: Backoff | None) -> None:
        super().__init__(spec.name, emit, pause_s=pause_s, backoff=backoff)
        self._table = open_table(
            spec.source,
            spec.sql_table(),
            spec.key,
            updated_at=spec.updated_at,
            schema=spec.schema,
            named_by=spec.named_by,
            timeout_s=spec.timeout_s,
        )
        self._tracker: Tracker = WatermarkTracker(self._table)
        self._progress = WatchState(self._announce.name, self._table.identity, self._table.db.dialect)

    @property
    def watching(self) -> str:
        return self._table.identity
