"""Install or remove the optional change triggers that make a PostgreSQL table announce its writes.

The DDL is ``sql/postgresql/watch_trigger.sql``: a statement-level
``AFTER INSERT`` and a statement-level ``AFTER UPDATE`` trigger (one per
event: PostgreSQL allows transition tables on single-event triggers only)
that bump the table's counter row in ``shardwise_watch_changes`` and
``pg_notify('shardwise_data', ...)`` with the table, the operation, the
number of changed rows and their largest key.

A table name cannot be a bind parameter, so the DDL is composed with
:mod:`psycopg.sql` (``Identifier`` and ``Literal``), never formatted as
text, and only after the table and key column were found in the reflected
schema. The counter table and the trigger function live in the connection's
default schema; watchers find that schema through the trigger itself.

Both functions are idempotent. The triggers cost every writing statement on
the table one counter-row update (writers of that table serialise on the
row at commit) and one notification.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from psycopg import sql

from shardwise.db.sqlfiles import load_sql, query
from shardwise.errors import ConfigError, SourceError
from shardwise.watch.pgwire import driver
from shardwise.watch.table import WatchedTable, open_table

__all__ = ["find_trigger", "install_trigger", "trigger_installed", "uninstall_trigger"]


def install_trigger(url: str, table: str, key: str, *, schema: str | None = None) -> None:
    """Create (or re-create) the change triggers on ``table``, reporting changes by ``key``."""
    watched = _open_postgres(url, table, key, schema)
    try:
        with _ddl_transaction(watched, "installing the change trigger on") as conn:
            ddl = sql.SQL(load_sql("postgresql", "watch_trigger")).format(
                watch_schema=sql.Identifier(_default_schema(conn)),
                table=sql.Identifier(watched.src.schema, watched.src.table.name),
                key=sql.Literal(watched.src.key.name),
                label=sql.Literal(watched.label),
            )
            driver(conn).execute(ddl)
    finally:
        watched.db.dispose()


def uninstall_trigger(url: str, table: str, key: str, *, schema: str | None = None) -> None:
    """Drop the change triggers from ``table``; nothing happens if they are not there."""
    watched = _open_postgres(url, table, key, schema)
    try:
        with _ddl_transaction(watched, "removing the change trigger from") as conn:
            ddl = sql.SQL(load_sql("postgresql", "watch_untrigger")).format(
                table=sql.Identifier(watched.src.schema, watched.src.table.name)
            )
            driver(conn).execute(ddl)
    finally:
        watched.db.dispose()


def trigger_installed(url: str, table: str, key: str, *, schema: str | None = None) -> bool:
    """Whether both change triggers are installed and enabled on ``table`` (always False off PostgreSQL)."""
    watched = open_table(url, table, key, schema=schema)
    try:
        if not watched.db.is_postgres:
            return False
        doing = f"looking for the change trigger on {watched.identity}"
        with watched.db.errors(doing), watched.db.engine.connect() as conn:
            return find_trigger(conn, watched) is not None
    finally:
        watched.db.dispose()


def find_trigger(conn: sa.Connection, watched: WatchedTable) -> str | None:
    """The schema holding the table's counter row if both triggers are enabled, else None."""
    params = {"schema": watched.src.schema, "table": watched.src.table.name}
    found = conn.execute(query("postgresql", "watch_trigger_find"), params).scalar()
    return str(found) if found is not None else None


def _open_postgres(url: str, table: str, key: str, schema: str | None) -> WatchedTable:
    watched = open_table(url, table, key, schema=schema)
    if not watched.db.is_postgres:
        watched.db.dispose()
        raise ConfigError(
            f"change triggers need PostgreSQL (LISTEN/NOTIFY); {watched.identity} is "
            f"{watched.db.dialect}. Watch it with a WatermarkPoller instead (mode='poll')"
        )
    return watched


@contextmanager
def _ddl_transaction(watched: WatchedTable, doing: str) -> Iterator[sa.Connection]:
    """One transaction for composed DDL; SQLAlchemy's and psycopg's own errors mapped alike."""
    doing = f"{doing} {watched.identity}"
    with watched.db.errors(doing), watched.db.engine.begin() as conn:
        yield conn


def _default_schema(conn: sa.Connection) -> str:
    schema = sa.inspect(conn).default_schema_name
    if schema is None:
        raise SourceError(
            "the database reports no default schema (current_schema() is NULL); set the search_path"
        )
    return schema
