"""The ``sql`` source kind: a table of a database named by a SQLAlchemy URL (PostgreSQL, SQLite)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardwise.errors import ConfigError
from shardwise.sources.base import Source
from shardwise.sources.registry import SourceOptions
from shardwise.sources.sql.options import SqlSourceOptions

if TYPE_CHECKING:
    from shardwise.watch.events import Emitter
    from shardwise.watch.spec import WatchSpec
    from shardwise.watch.watcher import Seen, Watcher

__all__ = ["KIND", "SqlKind"]


@dataclass(frozen=True)
class SqlKind:
    """Opens :class:`~shardwise.sources.sql.source.SqlSource` for a database URL; ``--table`` is needed."""

    name: str = "sql"
    label: str = "a database table"
    extra: str | None = None
    schemes: tuple[str, ...] = ("postgresql", "postgres", "sqlite")
    suffixes: tuple[str, ...] = ()
    whole_files: bool = False
    options: type[SqlSourceOptions] = SqlSourceOptions

    def open(self, location: str, options: SourceOptions, own: SqlSourceOptions) -> Source:
        from shardwise.sources.sql.source import SqlSource

        if not options.table:
            raise ConfigError(
                f"source {location.split('://', 1)[0]}://... is a database, so a table is needed; "
                "pass --table NAME"
            )
        return SqlSource(
            location, options.table, options.key, options.text_column, own.where,
            query_timeout_s=own.query_timeout_s,
            input_columns=options.input_columns, image_column=options.image_column,
            image_access=options.image_access, **options.keywords(),
        )  # fmt: skip

    def on_this_host(self, location: str) -> bool:
        from shardwise.db.connect import on_this_host

        return on_this_host(location)

    def watcher(self, spec: WatchSpec, emit: Emitter, *, seen: Seen | None = None, **options: Any) -> Watcher:
        """A PostgreSQL table whose change triggers are installed is heard (LISTEN/NOTIFY), any other
        table polled for its watermark; ``spec.mode`` ``notify`` or ``poll`` forces the choice."""
        from shardwise.watch.pg_notify import PgNotifyWatcher
        from shardwise.watch.poller import WatermarkPoller
        from shardwise.watch.trigger import trigger_installed

        mode = spec.mode
        if mode == "auto":
            installed = trigger_installed(spec.source, spec.sql_table(), spec.key, schema=spec.schema)
            mode = "notify" if installed else "poll"
        if mode == "notify":
            return PgNotifyWatcher(spec, emit, **options)
        return WatermarkPoller(spec, emit, **options)


KIND = SqlKind()
