"""Pick the watcher for a source: its source kind answers how it is watched.

The SQL kind watches a PostgreSQL table whose change triggers are installed
with :class:`~shardwise.watch.pg_notify.PgNotifyWatcher` (it hears writes at
once and counts UPDATEs), any other table with
:class:`~shardwise.watch.poller.WatermarkPoller` (``mode`` ``"notify"`` and
``"poll"`` force the choice); a file kind lists a local path or ``s3://``
location with :class:`~shardwise.watch.object_watcher.ObjectWatcher`. A new
source kind is watched the way its ``watcher`` says, without a change here.
"""

from __future__ import annotations

from typing import Any

from shardwise.sources.registry import kind_at
from shardwise.watch.events import Emitter
from shardwise.watch.spec import WatchSpec
from shardwise.watch.watcher import Seen, Watcher

__all__ = ["open_watcher"]


def open_watcher(spec: WatchSpec, emit: Emitter, *, seen: Seen | None = None, **options: Any) -> Watcher:
    """The watcher for ``spec`` (its source resolved: a database URL with a table, or a location of files),
    as the source kind that ``spec.source`` goes to makes it.

    ``seen`` applies to a location of files; ``options`` go to the watcher's constructor.
    """
    return kind_at(spec.source).watcher(spec, emit, seen=seen, **options)
