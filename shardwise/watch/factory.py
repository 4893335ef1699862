"""Pick the watcher for a source: LISTEN/NOTIFY, a watermark poller, or an object lister.

``mode="auto"`` uses :class:`PgNotifyWatcher` for a PostgreSQL table whose
change triggers are installed (it hears writes at once and counts UPDATEs),
:class:`WatermarkPoller` for any other SQL table, and
:class:`ObjectWatcher` for a local path or ``s3://`` location. ``"notify"``
and ``"poll"`` force the SQL choice.
"""

from __future__ import annotations

from typing import Any, Literal

from shardwise.errors import ConfigError
from shardwise.sources import is_sql_url
from shardwise.watch.events import Emitter, check_name
from shardwise.watch.object_watcher import ObjectWatcher, Seen
from shardwise.watch.pg_notify import PgNotifyWatcher
from shardwise.watch.poller import WatermarkPoller
from shardwise.watch.trigger import trigger_installed

__all__ = ["Mode", "open_watcher"]

Mode = Literal["auto", "notify", "poll"]


def open_watcher(
    source: str,
    *,
    name: str,
    emit: Emitter,
    table: str | None = None,
    key: str = "id",
    updated_at: str | None = None,
    mode: Mode = "auto",
    schema: str | None = None,
    interval_s: float = 30.0,
    debounce_s: float = 2.0,
    seen: Seen | None = None,
    **options: Any,
) -> PgNotifyWatcher | WatermarkPoller | ObjectWatcher:
    """The watcher for ``source`` (a SQL URL with ``table``, or a Parquet location); see the module doc."""
    check_name(name)
    if mode not in ("auto", "notify", "poll"):
        raise ConfigError(f"mode must be 'auto', 'notify' or 'poll'; got {mode!r}")
    if not is_sql_url(source):
        if table is not None or updated_at is not None or mode != "auto":
            raise ConfigError(
                "table, updated_at and mode apply to SQL sources only; a Parquet location is watched by "
                "listing its objects (drop them, or pass a database URL)"
            )
        return ObjectWatcher(source, name, emit, seen=seen, interval_s=interval_s, **options)
    if not table:
        raise ConfigError("a SQL source needs the table to watch; pass table=NAME")
    if mode == "auto":
        mode = "notify" if trigger_installed(source, table, key, schema=schema) else "poll"
    if mode == "notify":
        return PgNotifyWatcher(
            source, table, key, name, emit, debounce_s, schema=schema, updated_at=updated_at, **options
        )
    return WatermarkPoller(
        source, table, key, name, emit, updated_at=updated_at, schema=schema, interval_s=interval_s, **options
    )
