"""The ``sql`` sink kind's registry entry: results in a database table, PostgreSQL (with pgvector for
vectors) or SQLite. It imports no database driver, so listing the kinds (``--help``) stays fast."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardwise.errors import ConfigError
from shardwise.sinks.registry import Destination, SinkOptions
from shardwise.sinks.sql.options import SqlOptions

if TYPE_CHECKING:
    from shardwise.model import OutputColumn
    from shardwise.retry_policy import RetryPolicy
    from shardwise.sinks.base import Layout, Sink

__all__ = ["KIND", "SqlKind"]


class SqlKind:
    """Results in a database table: PostgreSQL (with pgvector for vectors) or SQLite."""

    name = "sql"
    label = "a database table (PostgreSQL, pgvector, SQLite)"
    extra = None
    schemes = ("postgresql", "postgres", "sqlite")
    options = SqlOptions

    def require(self) -> None:
        """SQLAlchemy and psycopg are core dependencies."""

    def target(self, dest: Destination) -> str:
        return dest.table

    def check(self, dest: Destination, options: SinkOptions) -> None:
        from shardwise.sinks.naming import parse_table_name

        parse_table_name(dest.table)

    def check_outputs(self, options: SinkOptions, model: str, outputs: tuple[OutputColumn, ...]) -> None:
        assert isinstance(options, SqlOptions)
        given = [
            f"--{name.replace('_', '-')} {getattr(options, name)}"
            for name, unset in (("embedding_type", "auto"), ("index", "none"))
            if getattr(options, name) != unset
        ]
        if given and not any(column.kind == "vector" for column in outputs):
            shown, verb = ", ".join(column.name for column in outputs), "store" if given[1:] else "stores"
            raise ConfigError(
                f"{' and '.join(given)} {verb} vector outputs, and model {model!r} writes none "
                f"({shown}); drop {' and '.join(g.split()[0] for g in given)}, or give an embedding model"
            )

    def same_database(self, dest: Destination, url: str) -> bool:
        if "://" not in url or url.split("://", 1)[0].split("+", 1)[0].lower() not in self.schemes:
            return False
        return _database_of(dest.location) == _database_of(url)

    def on_this_host(self, dest: Destination) -> bool:
        from shardwise.db.connect import on_this_host

        return on_this_host(dest.location)

    def folder_marker(self) -> str | None:
        return None

    def open(self, dest: Destination, layout: Layout, options: SinkOptions, retry: RetryPolicy) -> Sink:
        assert isinstance(options, SqlOptions)
        from shardwise.sinks.sql.sink import SqlSink

        return SqlSink(
            dest.location,
            dest.table,
            layout,
            embedding=options.embedding_type,
            index=options.index,
            metric=options.index_metric,
            timeout_s=retry.db_timeout_s,
        )


def _database_of(url: str) -> str:
    """A URL without its credentials and query, to compare which database two URLs name."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    return f"{parsed.get_backend_name()}://{parsed.host or ''}:{parsed.port or ''}/{parsed.database or ''}"


KIND = SqlKind()
"""The ``sql`` entry of the ``shardwise.sinks`` entry-point group."""
