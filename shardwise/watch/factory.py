"""Pick the watcher for a source: LISTEN/NOTIFY, a watermark poller, or an object lister.

``mode="auto"`` uses :class:`PgNotifyWatcher` for a PostgreSQL table whose
change triggers are installed (it hears writes at once and counts UPDATEs),
:class:`WatermarkPoller` for any other SQL table, and
:class:`ObjectWatcher` for a local path or ``s3://`` location. ``"notify"``
and ``"poll"`` force the SQL choice.
"""

from __future__ import annotations

from typing import Any

from shardwise.watch.events import Emitter
from shardwise.watch.object_watcher import ObjectWatcher, Seen
from shardwise.watch.pg_notify import PgNotifyWatcher
from shardwise.watch.poller import WatermarkPoller
from shardwise.watch.spec import WatchSpec
from shardwise.watch.trigger import trigger_installed

__all__ = ["open_watcher"]


def open_watcher(
    spec: WatchSpec, emit: Emitter, *, seen: Seen | None = None, **options: Any
) -> PgNotifyWatcher | WatermarkPoller | ObjectWatcher:
    """The watcher for ``spec`` (its source resolved: a SQL URL with a table, or a Parquet location).

    ``seen`` applies to a Parquet location; ``options`` go to the watcher's constructor.
    """
    if not spec.is_sql:
        return ObjectWatcher(spec, emit, seen=seen, **options)
    mode = spec.mode
    if mode == "auto":
        installed = trigger_installed(spec.source, spec.sql_table(), spec.key, schema=spec.schema)
        mode = "notify" if installed else "poll"
    if mode == "notify":
        return PgNotifyWatcher(spec, emit, **options)
    return WatermarkPoller(spec, emit, **options)
