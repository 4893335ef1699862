"""The input fingerprint of a row, computed in the database exactly as the pipeline stores it.

``--only-new`` skips a row when the results table holds a result for the
model version whose ``input_fingerprint`` equals the row's current one. The
pipeline stores :func:`shardwise.lineage.value_fingerprint` of the value *as
the source read it* (after the driver and SQLAlchemy decoded it), so the
database must compute that same function of the same value. Where SQL and
Python disagree for a column type, every row of that type is "changed" on
every run and ``--only-new`` rescores the whole table, silently; so the rule
is per column type, by what a read returns:

* **text** (``text``, ``varchar``, ``citext``, ``name``, enums, ``xml``,
  domains over them, SQLite ``TEXT``; any type SQLAlchemy does not know,
  which psycopg reads as its text form): hex MD5 of the UTF-8 bytes of its
  text form, ``md5(CAST(c AS text))``.
* **char(n)** (``bpchar``): read padded with spaces to ``n``, but
  PostgreSQL's cast to ``text`` strips the padding, so the padded text form
  is hashed (``format('%s', c)``, NULL kept NULL). A ``char(n)`` *key* is
  stored padded too, so the anti-join compares its padded form
  (:func:`stored_key`).
* **json, jsonb**: psycopg decodes them, so a JSON string ``"héllo"`` is read
  as the Python text ``héllo``, not the JSON text ``"héllo"``. Its
  fingerprint is the MD5 of the string's value (``c #>> '{}'``); any other
  JSON value (an object, a number, ``null``) is read as something that is
  not text, which the engine dead-letters, and has no fingerprint (NULL),
  as in Python. On SQLite, SQLAlchemy decodes a column declared ``JSON``
  with ``json.loads``: :data:`SQLITE_JSON_FINGERPRINT` does the same.
* **binary** (PostgreSQL ``bytea``, SQLite ``BLOB``): hex MD5 of the stored
  bytes. A binary text column is scored as the UTF-8 text those bytes encode
  (:func:`shardwise.model.text.coerce_text` decodes it; invalid UTF-8 is a dead
  letter), and for valid UTF-8 the MD5 of the bytes *is* the MD5 of the UTF-8
  text, so one rule covers both sides. Nothing is decoded in SQL: decoding
  (``convert_from``) would fail the whole query on one bad row, where Python
  dead-letters just that row.
* **not text** (integers, numerics, booleans, dates and times, arrays,
  UUIDs): read as Python values that are not text, which the engine
  dead-letters, so they have no fingerprint: NULL, as in Python.

A row read from **several columns** (a text pair, ``--text-pair-column``, or
the columns a generator's prompt names) has the fingerprint of its members'
fingerprints, concatenated (``md5(md5(text) || md5(pair))``): NULL when any
member is NULL, as ``||`` gives.

On SQLite the fingerprint is a SQL function, :data:`SQLITE_FINGERPRINT`,
registered on every connection and backed by ``value_fingerprint`` itself, so
the two cannot drift apart; it also covers a ``TEXT`` column that holds BLOB
values, which SQLite allows. On PostgreSQL it is the built-in ``md5()``,
which takes ``text`` and ``bytea`` and hashes their UTF-8 and raw bytes.
``tests/sources/test_sql_fingerprint_types.py`` checks both sides equal,
row by row, for every type above.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

from shardwise.lineage import value_fingerprint

__all__ = [
    "SQLITE_FINGERPRINT",
    "SQLITE_JSON_FINGERPRINT",
    "fingerprint",
    "register_sqlite_fingerprint",
    "stored_key",
]

SQLITE_FINGERPRINT = "shardwise_fingerprint"
"""The SQL function registered on SQLite connections: ``value_fingerprint`` of its argument."""

SQLITE_JSON_FINGERPRINT = "shardwise_json_fingerprint"
"""The SQL function for a SQLite column declared ``JSON``: ``value_fingerprint`` of ``json.loads`` of it."""

ReadAs = Literal["text", "padded", "json", "jsonb", "bytes", "other"]

_NOT_TEXT = (
    sa.Integer,
    sa.Numeric,
    sa.Boolean,
    sa.Date,
    sa.DateTime,
    sa.Time,
    sa.Interval,
    sa.ARRAY,
    sa.Uuid,
)
"""Type families a read returns as Python values that are not text (int, Decimal, datetime, list ...)."""


def _json_fingerprint(raw: object) -> str | None:
    """What SQLAlchemy's SQLite JSON type reads (``json.loads``), fingerprinted; None where it is not JSON."""
    if not isinstance(raw, (str, bytes)):
        return None
    try:
        return value_fingerprint(json.loads(raw))
    except ValueError:  # a read of the row fails too; here it only has no fingerprint
        return None


def _on_connect(dbapi_conn: sqlite3.Connection, _record: object) -> None:
    dbapi_conn.create_function(SQLITE_FINGERPRINT, 1, value_fingerprint, deterministic=True)
    dbapi_conn.create_function(SQLITE_JSON_FINGERPRINT, 1, _json_fingerprint, deterministic=True)


def register_sqlite_fingerprint(engine: sa.Engine) -> None:
    """Register :data:`SQLITE_FINGERPRINT` and :data:`SQLITE_JSON_FINGERPRINT` on each new connection of
    a SQLite ``engine``."""
    sa.event.listen(engine, "connect", _on_connect)


def _base(column_type: sa.types.TypeEngine[Any]) -> sa.types.TypeEngine[Any]:
    """A PostgreSQL domain's underlying type (through domains of domains); any other type as it is."""
    while isinstance(column_type, pg.DOMAIN):
        column_type = column_type.data_type
    return column_type


def read_as(column_type: sa.types.TypeEngine[Any]) -> ReadAs:
    """What a read of a column of ``column_type`` returns, as far as its fingerprint is concerned."""
    column_type = _base(column_type)
    if isinstance(column_type, sa.JSON):
        return "jsonb" if isinstance(column_type, pg.JSONB) else "json"
    if isinstance(column_type, sa.LargeBinary):
        return "bytes"
    if isinstance(column_type, sa.CHAR):  # before String, which it is too
        return "padded"
    if isinstance(column_type, _NOT_TEXT):
        return "other"
    return "text"  # String and its kin, and types SQLAlchemy does not know (read as text)


def fingerprint(columns: Sequence[sa.ColumnElement[Any]], dialect: str) -> sa.ColumnElement[Any]:
    """The fingerprint of a row's value read from ``columns`` (a text, or the text and more columns)."""
    if len(columns) == 1:
        return _fingerprint(columns[0], dialect)
    members = [_fingerprint(c, dialect) for c in columns]
    joined = members[0]
    for member in members[1:]:
        joined = joined.op("||", return_type=sa.Text)(member)
    return _fingerprint(joined, dialect)


def _fingerprint(column: sa.ColumnElement[Any], dialect: str) -> sa.ColumnElement[Any]:
    """The fingerprint of ``column``'s value, as SQL for ``dialect``; NULL for a NULL value."""
    kind = read_as(column.type)
    column = sa.type_coerce(column, _base(column.type))  # a domain's operators are its base type's
    if dialect == "sqlite":
        name = SQLITE_JSON_FINGERPRINT if kind in ("json", "jsonb") else SQLITE_FINGERPRINT
        return sa.Function(name, column, type_=sa.Text)
    if kind == "bytes":
        return sa.func.md5(column, type_=sa.Text)  # md5(bytea) is built in
    if kind in ("json", "jsonb"):
        typeof = sa.func.jsonb_typeof if kind == "jsonb" else sa.func.json_typeof
        value = column.op("#>>", return_type=sa.Text)(sa.literal_column("'{}'", pg.ARRAY(sa.Text)))
        return sa.case((typeof(column) == "string", sa.func.md5(value, type_=sa.Text)))
    if kind == "padded":
        return sa.case((column.is_not(None), sa.func.md5(_padded(column), type_=sa.Text)))
    if kind == "other":
        return sa.cast(sa.null(), sa.Text)  # compared with =, so it matches nothing, as NULL should
    return sa.func.md5(sa.cast(column, sa.Text), type_=sa.Text)


def _padded(column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """A ``char(n)`` value's text as read, padded (a cast to text would strip the padding); '' for NULL."""
    return sa.func.format("%s", column, type_=sa.Text)


def stored_key(key: sa.ColumnElement[Any], dialect: str) -> sa.ColumnElement[Any]:
    """The key as the results store it, to compare with their ``source_key``: the value as read.

    The same as the column but for a PostgreSQL ``char(n)`` key, read (and
    stored) padded, which ``=`` against ``text`` would compare stripped, so
    that no row would ever match its result.
    """
    if dialect == "sqlite" or read_as(key.type) != "padded":
        return key
    return _padded(key)
