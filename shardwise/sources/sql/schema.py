"""Identifiers checked against the reflected schema, never formatted into SQL.

A SQL source names a schema, a table (``name`` or ``schema.name``, see
:mod:`shardwise.sources.sql.names`) and columns. Each name must be one the
database reports through SQLAlchemy's inspector; the reflected
:class:`sqlalchemy.Table` then quotes it wherever it appears in a query. A name
that is not there (a typo, or an injection attempt such as
``docs; DROP TABLE docs``) is refused with a :class:`SourceError` that lists
the names that do exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from shardwise.errors import ConfigError, SourceError
from shardwise.sources.base import KeyType
from shardwise.sources.sql.names import table_reference

__all__ = [
    "RESULT_COLUMNS",
    "SourceTable",
    "reflect_results",
    "reflect_source",
]

RESULT_COLUMNS = ("source_key", "model_version", "input_fingerprint")
"""The results-table columns ``--only-new`` reads; the results store owns the rest."""

_LISTED = 40


def _listing(names: Iterable[str]) -> str:
    """Names for an error message; long lists are cut so the message stays readable."""
    names = list(names)
    shown = ", ".join(names[:_LISTED]) or "(none)"
    return shown + (f", ... and {len(names) - _LISTED} more" if len(names) > _LISTED else "")


@dataclass(frozen=True)
class SourceTable:
    """The reflected source table and the columns a SQL source reads: key, text, and more input columns."""

    table: sa.Table
    schema: str
    key: sa.Column[Any]
    text: sa.Column[Any]
    key_kind: KeyType
    more: tuple[sa.Column[Any], ...] = ()
    """Input columns after the text: a text pair, or the other columns a prompt names."""

    @property
    def inputs(self) -> tuple[sa.Column[Any], ...]:
        """The columns a row's value is read from: the text, then the others."""
        return (self.text, *self.more)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.inputs)


def _relations(insp: sa.Inspector, schema: str) -> list[str]:
    names = [*insp.get_table_names(schema=schema), *insp.get_view_names(schema=schema)]
    with suppress(NotImplementedError):  # only some dialects have materialised views
        names += insp.get_materialized_view_names(schema=schema)
    return sorted(set(names))


def _resolve_schema(insp: sa.Inspector, schema: str | None) -> str:
    if schema is None:
        default = insp.default_schema_name
        if default is None:
            raise SourceError("the database reports no default schema; name one with schema=...")
        return default
    schemas = insp.get_schema_names()
    if schema not in schemas:
        raise SourceError(f"schema {schema!r} not in the database; schemas are: {_listing(schemas)}")
    return schema


def _reflect(conn: sa.Connection, schema: str, table: str) -> sa.Table:
    from shardwise.sinks.sql.pgvector import recognise_vector_types

    recognise_vector_types(conn.dialect)  # a source or results table may hold pgvector columns
    return sa.Table(table, sa.MetaData(), schema=schema, autoload_with=conn)


def _column(table: sa.Table, name: str, role: str) -> sa.Column[Any]:
    if name not in table.c:
        columns = [c.name for c in table.columns]
        raise SourceError(
            f"{role} column {name!r} not in table {table.name!r}; columns are: {_listing(columns)}"
        )
    return table.c[name]


def _key_kind(column: sa.Column[Any]) -> KeyType:
    if isinstance(column.type, sa.Integer):
        return "int"
    if isinstance(column.type, sa.String):
        return "text"
    raise ConfigError(
        f"key column {column.name!r} has type {column.type!r}; the key must be an integer or text "
        "column (it orders the rows and addresses their results)"
    )


def reflect_source(
    conn: sa.Connection,
    table: str,
    key: str,
    text_column: str,
    schema: str | None,
    input_columns: Mapping[str, str] | None = None,
    text_role: str = "text",
) -> SourceTable:
    """Check every identifier against the database and return the reflected table.

    ``table`` is ``name`` or ``schema.name`` (:mod:`shardwise.sources.sql.names`; PostgreSQL only).
    ``input_columns`` maps each input column after the text to its role in messages
    (``text pair``, ``prompt``); ``text_role`` names the value column's (``image`` for an image column).
    """
    schema, table = table_reference(table, schema, conn.dialect.name)
    insp = sa.inspect(conn)
    resolved = _resolve_schema(insp, schema)
    relations = _relations(insp, resolved)
    if table not in relations:
        raise SourceError(
            f"table {table!r} not in schema {resolved!r}; tables and views are: {_listing(relations)}"
        )
    reflected = _reflect(conn, resolved, table)
    key_col = _column(reflected, key, "key")
    text_col = _column(reflected, text_column, text_role)
    more = tuple(_column(reflected, name, role) for name, role in (input_columns or {}).items())
    return SourceTable(reflected, resolved, key_col, text_col, _key_kind(key_col), more)


def reflect_results(conn: sa.Connection, name: str) -> sa.Table | None:
    """The results table if it exists (None: nothing was scored yet, so every row is new).

    ``name`` is ``table`` or ``schema.table``, read by the results store's own
    parser (imported here: the results package imports this one's base module,
    so a module-level import would be circular). An unqualified ``table`` is
    looked for where the store creates it: the connection's default schema
    (the first of PostgreSQL's ``search_path``), whichever schema the source
    table is in.
    """
    from shardwise.sinks.naming import parse_table_name

    named_schema, table = parse_table_name(name)
    insp = sa.inspect(conn)
    schema = named_schema or insp.default_schema_name
    if schema is None:
        raise SourceError("the database reports no default schema; name one: --results-table schema.table")
    if schema not in insp.get_schema_names() or table not in _relations(insp, schema):
        return None
    reflected = _reflect(conn, schema, table)
    missing: Sequence[str] = [c for c in RESULT_COLUMNS if c not in reflected.c]
    if missing:
        raise SourceError(
            f"results table {name!r} lacks column(s) {', '.join(missing)} that --only-new reads; "
            f"columns are: {_listing(c.name for c in reflected.columns)}"
        )
    return reflected
