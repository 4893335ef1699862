"""Watchers that turn "new data landed" into a ``shardwise.data.landed`` event.

Engine-level and orchestrator-free: each watcher calls an injected
:class:`Emitter` (the orchestrator passes ``prefect.events.emit_event``).

* :class:`PgNotifyWatcher`: PostgreSQL LISTEN/NOTIFY on the optional change
  triggers (:func:`install_trigger`), debounced, reconnecting, catching up.
* :class:`WatermarkPoller`: polls ``max(key)`` or ``max(updated_at)`` and the
  row count; PostgreSQL or SQLite, no trigger needed.
* :class:`ObjectWatcher`: lists a Parquet location (local or S3) and
  announces objects whose (key, ETag) was neither scored nor announced.
* :func:`open_watcher` picks one for a :class:`WatchSpec` (what to watch, how often).
"""

from __future__ import annotations

from shardwise.watch.events import EVENT, Announcer, Emitter, check_name, source_resource
from shardwise.watch.factory import open_watcher
from shardwise.watch.loop import Backoff
from shardwise.watch.object_watcher import ObjectWatcher
from shardwise.watch.pg_notify import CHANNEL, PgNotifyWatcher
from shardwise.watch.poller import WatermarkPoller
from shardwise.watch.spec import DEFAULT_DEBOUNCE_S, Mode, WatchSpec
from shardwise.watch.trigger import install_trigger, trigger_installed, uninstall_trigger
from shardwise.watch.watcher import Seen

__all__ = [
    "CHANNEL",
    "DEFAULT_DEBOUNCE_S",
    "EVENT",
    "Announcer",
    "Backoff",
    "Emitter",
    "Mode",
    "ObjectWatcher",
    "PgNotifyWatcher",
    "Seen",
    "WatchSpec",
    "WatermarkPoller",
    "check_name",
    "install_trigger",
    "open_watcher",
    "source_resource",
    "trigger_installed",
    "uninstall_trigger",
]
