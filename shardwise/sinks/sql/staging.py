"""A chunk's staging area: its rows wait in a connection-private TEMP table until the SQL sink merges them.

Streaming into the database as rows arrive keeps the writer's memory flat in
the shard's size. PostgreSQL loads rows with binary ``COPY`` (psycopg 3);
SQLite with ``executemany`` into a TEMP table, which lives in the
connection's own temp database and so never takes the shared write lock.
Each call to :meth:`Staging.add_rows` is its own short transaction, so no
transaction stays open while the model computes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np
import psycopg
import sqlalchemy as sa
from psycopg import postgres, pq
from psycopg import sql as psql
from psycopg.adapt import Dumper

from shardwise.db.codec import as_vector, check_key, pg_binary_float4_array
from shardwise.db.sqlfiles import load_sql, query
from shardwise.errors import ConfigError
from shardwise.model import OutputColumn
from shardwise.records import ResultRow
from shardwise.sinks.sql.pgvector import copy_type_name, register_vector_dumpers
from shardwise.sinks.sql.table import VectorStorage
from shardwise.sources.base import KeyType

__all__ = ["Staging"]

_PG_TYPES = {"vector": "float4[]", "float": "float8", "int": "int8", "text": "text", "json": "jsonb"}


class _Float4ArrayDumper(Dumper):
    """Dumps a float32 numpy vector as binary ``real[]`` in one numpy pass.

    psycopg's list dumper would need ``tolist()`` first: a Python float per
    element, ten times slower and, for a 384-d vector, 9 KiB of garbage a row.
    """

    format = pq.Format.BINARY
    oid = postgres.types["float4"].array_oid

    def dump(self, obj: Any) -> bytes:
        return pg_binary_float4_array(obj)


class Staging:
    """The TEMP table of one writer's connection, and how rows get into it."""

    def __init__(
        self,
        conn: sa.Connection,
        stage: sa.Table,
        outputs: tuple[OutputColumn, ...],
        key_type: KeyType,
        table_name: str,
        vectors: VectorStorage = "array",
    ) -> None:
        self.conn = conn
        self.vectors = vectors
        self.stage = stage
        self.outputs = outputs
        self.key_type = key_type
        self.table_name = table_name
        self.dialect = conn.dialect.name
        self.rows = 0

    def create(self) -> None:
        """Create the table, dropping leftovers a broken writer may have left on a pooled connection."""
        with self.conn.begin():
            self._drop_tables()
            self.conn.execute(sa.schema.CreateTable(self.stage))

    def drop(self) -> None:
        with self.conn.begin():
            self._drop_tables()

    def _drop_tables(self) -> None:
        self.conn.execute(sa.schema.DropTable(self.stage, if_exists=True))

    def _row(self, row: ResultRow) -> list[Any]:
        """One staged row in column order: seq, key, outputs, truncated, input_fingerprint."""
        key = check_key(row.key, self.key_type, self.table_name)
        if len(row.values) != len(self.outputs):
            expected = ", ".join(o.name for o in self.outputs)
            _mismatch(row, expected)
        values: list[Any] = [self.rows, key]
        for out in self.outputs:
            try:
                value = row.values[out.name]
            except KeyError:
                _mismatch(row, ", ".join(o.name for o in self.outputs))
            values.append(_column_value(value, out))
        values += [bool(row.truncated), row.input_fingerprint]
        self.rows += 1
        return values

    def _copy_type(self, kind: str) -> str:
        return copy_type_name(self.vectors) if kind == "vector" else _PG_TYPES[kind]

    def add_rows(self, rows: Sequence[ResultRow]) -> None:
        """Stage one batch of rows in one transaction."""
        if not rows:
            return
        with self.conn.begin():
            if self.dialect == "postgresql":
                self._copy_rows(rows)
            else:
                names = [c.name for c in self.stage.columns]
                params = [dict(zip(names, self._row(r), strict=True)) for r in rows]
                self.conn.execute(sa.insert(self.stage), params)

    def _copy_rows(self, rows: Sequence[ResultRow]) -> None:
        names = [c.name for c in self.stage.columns]
        kinds = ["int8", "int8" if self.key_type == "int" else "text"]
        kinds += [self._copy_type(o.kind) for o in self.outputs] + ["bool", "text"]
        stmt = psql.SQL(load_sql("postgresql", "stage_copy")).format(
            table=psql.Identifier(self.stage.name),
            columns=psql.SQL(", ").join(psql.Identifier(n) for n in names),
        )
        raw: psycopg.Connection[Any] = self.conn.connection.driver_connection  # type: ignore[assignment]
        with raw.cursor() as cursor:
            # Registered for this cursor only, by oid: COPY's set_types then dumps real[] with it.
            cursor.adapters.register_dumper(None, _Float4ArrayDumper)
            if self.vectors != "array":  # pgvector's types, binary, by their oids in this database
                register_vector_dumpers(cursor.adapters, raw)
            with cursor.copy(stmt) as copy:
                copy.set_types(kinds)
                for row in rows:
                    copy.write_row(self._row(row))

    def drop_duplicates(self) -> int:
        """Keep only the last staged row of each key; returns how many earlier copies went.

        A source key should appear once per shard, but a Parquet key column need
        not be unique, and PostgreSQL's ``ON CONFLICT DO UPDATE`` refuses to touch
        one row twice in a statement. The cheap count runs always, the delete only
        when there are duplicates.
        """
        stage = self.stage
        with self.conn.begin():
            dupes = self.conn.execute(
                sa.select(sa.func.count() - sa.func.count(sa.distinct(stage.c.source_key)))
            ).scalar_one()
            if not dupes:
                return 0
            later = stage.alias("later")
            newer = sa.exists().where(later.c.source_key == stage.c.source_key, later.c.seq > stage.c.seq)
            deleted = self.conn.execute(sa.delete(stage).where(newer)).rowcount
        self.rows -= deleted
        return int(deleted)

    def analyze(self) -> None:
        """Give PostgreSQL's planner statistics for the staged rows (autovacuum skips temp tables)."""
        if self.dialect == "postgresql":
            with self.conn.begin():
                self.conn.execute(query(self.dialect, "stage_analyze"))


def _column_value(value: Any, out: OutputColumn) -> Any:
    """A value as the database driver takes it: a vector as float32, a numpy scalar as its Python value.

    sqlite3 stores a ``numpy.int64`` (not an ``int`` subclass) as an 8-byte blob, and psycopg has
    no dumper for numpy scalars, so ``int``, ``float`` and ``text`` outputs are unwrapped here.
    """
    if value is None:
        return None
    if out.kind == "vector":
        return as_vector(value, out.name, out.dim)
    return value.item() if isinstance(value, np.generic) else value


def _mismatch(row: ResultRow, expected: str) -> NoReturn:
    """Raise the error for a row whose values do not name exactly the model's outputs."""
    raise ConfigError(
        f"result row for key {row.key!r} has values for {', '.join(sorted(row.values))}; "
        f"the results table expects exactly: {expected}. The model's outputs changed; "
        "choose another --results-table"
    )
