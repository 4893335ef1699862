"""The SQL table a watcher watches: checked against the reflected schema, named without a password.

Every identifier (schema, table, key, ``updated_at``) must be one the
database reports (:func:`shardwise.sources.sql.schema.reflect_source`), so a
typo or an injection attempt such as ``docs; DROP TABLE docs`` is refused
with a :class:`~shardwise.errors.SourceError` before any SQL names it. Queries
then go through the reflected :class:`sqlalchemy.Table`, which quotes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import sqlalchemy as sa

from shardwise.errors import ConfigError, SourceError
from shardwise.secrets.by_reference import by_reference
from shardwise.sources.sql.db import Database
from shardwise.sources.sql.schema import SourceTable, reflect_source

__all__ = ["WatchedTable", "from_json", "open_table", "to_json"]

_MARK_TYPES = (sa.DateTime, sa.Date, sa.Integer)


@dataclass(frozen=True)
class WatchedTable:
    """A reflected source table, the database it lives in, and the column its watermark follows."""

    db: Database
    src: SourceTable
    column: sa.Column[Any]
    """The watermark column: ``updated_at`` when given, else the key."""
    identity: str
    """``<url without password>#<schema>.<table>``, or by the reference the URL was given by
    (:mod:`shardwise.secrets.by_reference`): safe to put in an event."""

    @property
    def label(self) -> str:
        """``schema.table``, as the change trigger names the table."""
        return f"{self.src.schema}.{self.src.table.name}"

    @property
    def tracks_updated_at(self) -> bool:
        return self.column is not self.src.key

    def describe(self) -> dict[str, Any]:
        """The fields every payload about this table starts with."""
        return {"source": self.identity, "table": self.label}


def open_table(
    url: str,
    table: str,
    key: str,
    *,
    updated_at: str | None = None,
    schema: str | None = None,
    named_by: str | None = None,
    timeout_s: float = 0,
) -> WatchedTable:
    """Connect once to check the identifiers; the returned table owns ``db`` (dispose it when done).
    ``named_by`` is the reference ``url`` was resolved from, if any: the identity names it instead.
    ``timeout_s`` bounds each wait for the database's answer (see
    :attr:`~shardwise.watch.spec.WatchSpec.timeout_s`)."""
    db = Database(url, answer_timeout_s=timeout_s)
    try:
        with db.errors(f"checking table {table!r}"), db.engine.connect() as conn:
            # A watcher reads no text column: the key stands in for it in the check.
            src = reflect_source(conn, table, key, key, schema)
        column = src.key if updated_at is None else _updated_at(src.table, updated_at)
    except BaseException:
        db.dispose()
        raise
    return WatchedTable(db, src, column, by_reference(named_by, db.identity(src.schema, src.table.name)))


def _updated_at(table: sa.Table, name: str) -> sa.Column[Any]:
    if name not in table.c:
        columns = ", ".join(c.name for c in table.columns)
        raise SourceError(f"updated_at column {name!r} not in table {table.name!r}; columns are: {columns}")
    column = table.c[name]
    if not isinstance(column.type, _MARK_TYPES):
        raise ConfigError(
            f"updated_at column {name!r} has type {column.type!r}; it must be a timestamp, date or "
            "integer column that grows when a row changes, or leave updated_at unset to follow the key"
        )
    return column


def to_json(value: Any) -> Any:
    """A watermark value as JSON: timestamps and dates as ISO 8601 text, keys as they are."""
    return value.isoformat() if isinstance(value, (datetime, date)) else value


def from_json(value: Any, column: sa.Column[Any]) -> Any:
    """The inverse of :func:`to_json`, so the value binds with the column's type."""
    if isinstance(value, str) and isinstance(column.type, sa.DateTime):
        return datetime.fromisoformat(value)
    if isinstance(value, str) and isinstance(column.type, sa.Date):
        return date.fromisoformat(value)
    return value
