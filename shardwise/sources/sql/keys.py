"""Read chosen rows of a SQL source by key: ``key IN (...)`` in chunks, in one read-only transaction.

A keyed read serves a redrive of dead letters: a few keys, named one by one,
not a key range. The keys are bound parameters (at most
:data:`~shardwise.sources.keys.KEY_CHUNK` per statement), and every chunk
applies the same conditions as a shard read (the operator's ``where`` filter,
``key IS NOT NULL``), so a keyed read never returns a row a plan would not.
All chunks run in one transaction, so on PostgreSQL they see one snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa

from shardwise.model.text import row_value
from shardwise.sources.base import Key, SourceRow
from shardwise.sources.keys import key_chunks
from shardwise.sources.sql.query import Selection
from shardwise.sources.sql.snapshot import read_only

__all__ = ["begin_keyed_read", "keyed_query", "keyed_rows"]


def keyed_query(sel: Selection, keys: Sequence[Key]) -> sa.Select[Any, Any]:
    """The rows of ``sel`` whose key is one of ``keys``, ordered by key."""
    key = sel.src.key
    return sa.select(key, *sel.src.inputs).where(*sel.conditions(), key.in_(list(keys))).order_by(key)


def begin_keyed_read(conn: sa.Connection) -> None:
    """One transaction for every chunk: read-only ``REPEATABLE READ`` on PostgreSQL, ``BEGIN`` on SQLite."""
    if conn.dialect.name == "postgresql":
        read_only(conn).begin()
    elif conn.dialect.name == "sqlite":
        # pysqlite opens no transaction for SELECTs; BEGIN makes the chunks one read.
        conn.exec_driver_sql("BEGIN")
    else:
        conn.begin()


def keyed_rows(conn: sa.Connection, sel: Selection, keys: Sequence[Key]) -> Iterator[SourceRow]:
    """Stream the rows of ``keys`` (already in the key column's type and sorted), chunk by chunk.

    Each chunk is ordered by key in the database's collation; chunks follow the order of ``keys``.
    """
    names = sel.src.input_names
    for chunk in key_chunks(keys):
        for key, *values in conn.execute(keyed_query(sel, chunk)):
            yield SourceRow(key, row_value(values, names))
