"""The input fingerprint of a row, computed in the database exactly as the pipeline stores it.

``--only-new`` skips a row when the results table holds a result for the
model version whose ``input_fingerprint`` equals the row's current one. The
pipeline stores :func:`shardwise.lineage.value_fingerprint` of the value as
the source read it, so the database must compute that same function:

* **text** (``text``, ``varchar``, SQLite ``TEXT``): hex MD5 of its UTF-8 bytes.
* **binary** (PostgreSQL ``bytea``, SQLite ``BLOB``): hex MD5 of the stored
  bytes. A binary text column is scored as the UTF-8 text those bytes encode
  (:func:`shardwise.text.coerce_text` decodes it; invalid UTF-8 is a dead
  letter), and for valid UTF-8 the MD5 of the bytes *is* the MD5 of the UTF-8
  text, so one rule covers both sides. Nothing is decoded in SQL: decoding
  (``convert_from``) would fail the whole query on one bad row, where Python
  dead-letters just that row.
* **anything else** (integers, JSON ...): the engine dead-letters such values,
  so they never have a result to match; PostgreSQL hashes their text form
  only so that ``md5()`` has a valid argument.

A row read from **several columns** (a text pair, ``--text-pair-column``, or
the columns a generator's prompt names) has the fingerprint of its members'
fingerprints, concatenated (``md5(md5(text) || md5(pair))``): NULL when any
member is NULL, as ``||`` gives.

On SQLite the fingerprint is a SQL function, :data:`SQLITE_FINGERPRINT`,
registered on every connection and backed by ``value_fingerprint`` itself, so
the two cannot drift apart; it also covers a ``TEXT`` column that holds BLOB
values, which SQLite allows. On PostgreSQL it is the built-in ``md5()``,
which takes ``text`` and ``bytea`` and hashes their UTF-8 and raw bytes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from shardwise.lineage import value_fingerprint

__all__ = ["SQLITE_FINGERPRINT", "fingerprint", "register_sqlite_fingerprint"]

SQLITE_FINGERPRINT = "shardwise_fingerprint"
"""The SQL function registered on SQLite connections: ``value_fingerprint`` of its argument."""


def _on_connect(dbapi_conn: sqlite3.Connection, _record: object) -> None:
    dbapi_conn.create_function(SQLITE_FINGERPRINT, 1, value_fingerprint, deterministic=True)


def register_sqlite_fingerprint(engine: sa.Engine) -> None:
    """Register :data:`SQLITE_FINGERPRINT` on each new connection of a SQLite ``engine``."""
    sa.event.listen(engine, "connect", _on_connect)


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
    if dialect == "sqlite":
        return sa.Function(SQLITE_FINGERPRINT, column, type_=sa.Text)
    if isinstance(column.type, (sa.String, sa.LargeBinary)):
        return sa.func.md5(column, type_=sa.Text)  # md5(text) and md5(bytea) are both built in
    return sa.func.md5(sa.cast(column, sa.Text), type_=sa.Text)
