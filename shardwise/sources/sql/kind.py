"""The ``sql`` source kind: a table of a database named by a SQLAlchemy URL (PostgreSQL, SQLite)."""

from __future__ import annotations

from dataclasses import dataclass

from shardwise.errors import ConfigError
from shardwise.sources.base import Source
from shardwise.sources.registry import SourceOptions
from shardwise.sources.sql.options import SqlSourceOptions

__all__ = ["KIND", "SqlKind"]


@dataclass(frozen=True)
class SqlKind:
    """Opens :class:`~shardwise.sources.sql.source.SqlSource` for a database URL; ``--table`` is needed."""

    name: str = "sql"
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
        more = dict(options.more)
        for name in ("s3_client", "retry"):
            if getattr(options, name) is not None:
                more[name] = getattr(options, name)
        return SqlSource(
            location, options.table, options.key, options.text_column, own.where,
            query_timeout_s=own.query_timeout_s,
            input_columns=options.input_columns, image_column=options.image_column,
            image_access=options.image_access, **more,
        )  # fmt: skip


KIND = SqlKind()
