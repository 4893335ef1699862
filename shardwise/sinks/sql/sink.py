"""The SQL sink: a results table in PostgreSQL or SQLite, merged chunk by chunk, exactly once.

A chunk's rows are staged in a connection-private TEMP table (binary ``COPY``
on PostgreSQL, :mod:`shardwise.sinks.sql.staging`), then one transaction
claims the chunk's commit record in ``shardwise_commits`` (an ``INSERT ... ON
CONFLICT DO NOTHING``: no row back means it landed before, or a racing writer
holds it and this one waits for its commit), merges the rows by the rule of
:mod:`shardwise.sinks.sql.merge` and records the merge's split. The record and
the rows commit together, so the record exists exactly when the rows do,
whichever database holds the ledger. A shard's seal (:meth:`SqlSink.seal`)
claims the record of the chunk after its last with the position
``{"sealed": true}``, so a stale attempt's claim of that chunk finds it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from typing import Any, Literal

import sqlalchemy as sa

from shardwise.closing import Closing
from shardwise.db.codec import Float32Vector, bind_timestamp, decode_json, encode_json, utc_now
from shardwise.db.connect import make_engine, write_transaction
from shardwise.db.errors import mapped_errors, safe_url
from shardwise.db.sqlfiles import load_script, query, statement
from shardwise.errors import ConfigError, ShardwiseError
from shardwise.retry_policy import DEFAULT_DB_TIMEOUT_S
from shardwise.sinks.base import Layout, SinkChunk, SinkCommit
from shardwise.sinks.naming import parse_table_name
from shardwise.sinks.sql.merge import merge_rows
from shardwise.sinks.sql.pgvector import (
    EmbeddingType,
    IndexMetric,
    create_ann_index,
    recognise_vector_types,
    reflected_vector_family,
    resolve_embedding_type,
)
from shardwise.sinks.sql.staging import Staging
from shardwise.sinks.sql.table import VectorStorage, add_columns, check_layout, results_table, stage_table
from shardwise.sources.base import KeyType

__all__ = ["SqlSink", "existing_key_type"]

_SEALED = {"sealed": True}
"""The position a shard's seal records in ``shardwise_commits``; no chunk's position is this."""
_log = logging.getLogger(__name__)


def existing_key_type(engine: sa.Engine, name: str) -> KeyType | None:
    """The key type of results table ``name`` as it exists in ``engine``'s database; None if it does not."""
    schema, table = parse_table_name(name)
    with mapped_errors("inspect the results table", engine.url), engine.connect() as conn:
        insp = sa.inspect(conn)
        if not insp.has_table(table, schema=schema):
            return None
        columns = {c["name"]: c["type"] for c in insp.get_columns(table, schema=schema)}
    key = columns.get("source_key")
    return "int" if isinstance(key, sa.Integer) else "text" if key is not None else None


class SqlSink(Closing):
    """Results table ``name`` in the database at ``url``, for rows of ``layout``.

    Vector outputs are stored as ``embedding`` says (``--embedding-type``):
    ``auto`` keeps the type of an existing table, else takes pgvector's
    ``vector`` where the extension is installed or may be created, else
    ``real[]``; ``vector``/``halfvec`` create the extension alike, and are
    refused where it cannot be had (not on the server, or the role may not
    create it; see :func:`~shardwise.sinks.sql.pgvector.resolve_embedding_type`). With
    ``index="hnsw"``, :meth:`finish` builds an HNSW index on each vector
    output with ``metric``, if it is absent (``CREATE INDEX CONCURRENTLY``:
    writers are not blocked), and logs its build time. On PostgreSQL a statement may run or wait for a
    lock ``timeout_s`` seconds, and a connection that stops answering is given up a little later (see
    :mod:`shardwise.db.timeouts`); the index build alone is not bounded.
    """

    def __init__(
        self,
        url: str,
        name: str,
        layout: Layout,
        *,
        embedding: EmbeddingType = "auto",
        index: Literal["none", "hnsw"] = "none",
        metric: IndexMetric = "cosine",
        timeout_s: float = DEFAULT_DB_TIMEOUT_S,
    ) -> None:
        results_table(name, layout.outputs, layout.key_type)  # a bad name or output is refused here
        self.layout = layout
        self.target = name
        self.embedding, self.index, self.metric = embedding, index, metric
        self.engine = make_engine(url, timeout_s=timeout_s)
        recognise_vector_types(self.engine.dialect)
        self.url = safe_url(url)
        self._table: sa.Table | None = None

    def __repr__(self) -> str:
        return f"SqlSink({self.url!r}, {self.target!r})"

    def close(self) -> None:
        self.engine.dispose()

    @property
    def table(self) -> sa.Table:
        """The results table as this sink writes it, its vector type resolved (see the class docstring)."""
        if self._table is None:
            action = "inspect the results table"
            with mapped_errors(action, self.engine.url), self.engine.connect() as conn, conn.begin():
                return self._resolve(conn, create=False)
        return self._table

    def _resolve(self, conn: sa.Connection, *, create: bool) -> sa.Table:
        # ensure() resolves again even after a check: the check's answer creates no extension.
        if self._table is None or create:
            self._table = results_table(
                self.target, self.layout.outputs, self.layout.key_type, self._vectors(conn, create)
            )
        return self._table

    def _vectors(self, conn: sa.Connection, create: bool) -> VectorStorage:
        dims = [out.dim or 0 for out in self.layout.outputs if out.kind == "vector"]
        if not dims:
            return "array"
        schema, name = parse_table_name(self.target)
        if self.embedding == "auto" and sa.inspect(conn).has_table(name, schema=schema):
            stored = {
                family.split("(", 1)[0] for family in reflected_vector_family(conn, name, schema).values()
            }
            return "halfvec" if stored == {"halfvec"} else "vector" if stored == {"vector"} else "array"
        return resolve_embedding_type(conn, self.embedding, max(dims), create=create)

    def _made(self) -> bool:
        """False for an SQLite file not made yet: connecting would make it, and checking creates nothing.
        A server's database is there to ask."""
        url = self.engine.url
        return url.get_backend_name() != "sqlite" or os.path.exists(url.database or "")

    def check(self) -> None:
        if not self._made():
            return  # no database yet, so no table of another layout; ensure() makes both
        action = "inspect the results table"
        with mapped_errors(action, self.engine.url), self.engine.connect() as conn, conn.begin():
            # The answer the run will get: pgvector tried (and rolled back) where it is not created yet.
            table = self._resolve(conn, create=False)
            if sa.inspect(conn).has_table(table.name, schema=table.schema):
                check_layout(conn, table, self.target, ours=self._ours(conn))
        self._check_index()

    def ensure(self) -> None:
        """Create the results table and ``shardwise_commits`` if missing (an advisory lock on PostgreSQL
        serialises racing creators, the write lock on SQLite); check an existing table's layout.

        With ``embedding`` ``auto``, ``vector`` or ``halfvec`` the pgvector extension is created here when
        it is available and the role may; an HNSW index asked for on ``real[]`` columns is refused here,
        before any scoring.
        """
        action = "create the results table"
        with mapped_errors(action, self.engine.url), self.engine.connect() as conn, write_transaction(conn):
            if conn.dialect.name == "postgresql":
                conn.execute(query("postgresql", "schema_lock"))
            for stmt in load_script(conn.dialect.name, "sink_commits_schema"):
                conn.exec_driver_sql(stmt)
            table = self._resolve(conn, create=True)
            if sa.inspect(conn).has_table(table.name, schema=table.schema):
                missing = check_layout(conn, table, self.target, ours=self._ours(conn))
                if missing:
                    _log.info("results table %s gains columns %s", self.target, [c.name for c in missing])
                    add_columns(conn, table, missing)
            else:
                conn.execute(sa.schema.CreateTable(table, if_not_exists=True))
                made = {"results_table": self.target, "created_at": bind_timestamp(conn, utc_now())}
                conn.execute(statement(conn, "sink_table_made"), made)
        self._check_index()

    def _ours(self, conn: sa.Connection) -> bool:
        """Whether this sink created the results table (``shardwise_tables`` records it): only such a
        table gains the nullable columns a later run needs."""
        if not sa.inspect(conn).has_table("shardwise_tables"):
            return False  # a database no sink of this version created a table in
        return (
            conn.execute(statement(conn, "sink_table_ours"), {"results_table": self.target}).first()
            is not None
        )

    def _check_index(self) -> None:
        """Refuse ``index="hnsw"`` over ``real[]`` columns: there is nothing to build it on."""
        vectors = [c.name for c in self.table.columns if isinstance(c.type, Float32Vector)]
        if self.index == "hnsw" and vectors:
            raise ConfigError(
                f"index hnsw needs pgvector columns, and {self.target}.{vectors[0]} is real[] at {self.url} "
                "(pgvector is not installed there, or the table was made with real[]); install pgvector "
                "(CREATE EXTENSION vector) and give --embedding-type vector, or drop --index"
            )

    def stored_key_type(self) -> KeyType | None:
        return existing_key_type(self.engine, self.target) if self._made() else None

    def commit(self, chunk: SinkChunk) -> SinkCommit:
        what = f"chunk {chunk.number} of shard {chunk.shard_id}"
        with (
            # Unclassified database errors are the sink's, not the source's whose read is open around it.
            mapped_errors(f"merge {what} into {self.target}", self.engine.url, otherwise=ShardwiseError),
            self.engine.connect() as conn,
        ):
            with conn.begin():
                found = self._stored(conn, chunk.run_id, chunk.shard_id, chunk.number)
            if found is not None:
                return found
            table = self.table
            vectors: VectorStorage = next(
                (c.type.type_name for c in table.columns if hasattr(c.type, "type_name")), "array"
            )
            staging = Staging(
                conn, stage_table(table), self.layout.outputs, self.layout.key_type, self.target, vectors
            )
            try:
                staging.create()
                staging.add_rows(chunk.rows)
                staging.drop_duplicates()
                staging.analyze()
                return self._merge(conn, staging, chunk)
            except BaseException:
                conn.invalidate()  # its TEMP table goes with it
                raise
            finally:
                if not conn.invalidated:
                    staging.drop()

    def _merge(self, conn: sa.Connection, staging: Staging, chunk: SinkChunk) -> SinkCommit:
        where = {"run_id": chunk.run_id, "shard_id": chunk.shard_id, "chunk": chunk.number}
        with write_transaction(conn) as tx:
            claim = {
                **where,
                "results_table": self.target,
                "position": encode_json(dict(chunk.position)),
                "committed_at": bind_timestamp(conn, utc_now()),
            }
            if conn.execute(statement(conn, "sink_commit_claim"), claim).first() is None:
                found = self._stored(conn, chunk.run_id, chunk.shard_id, chunk.number)
                tx.rollback()
                assert found is not None  # the conflicting row is committed: the claim waited for it
                return found
            counts = merge_rows(conn, self.table, staging.stage, staging.rows, chunk.lineage)
            split = {"rows_inserted": counts.inserted, "rows_updated": counts.updated}
            split["rows_unchanged"] = counts.unchanged
            conn.execute(statement(conn, "sink_commit_counts"), {**where, **split})
        return SinkCommit("written", chunk.position, counts.inserted, counts.updated, counts.unchanged)

    def seal(self, run_id: str, shard_id: int, number: int) -> SinkCommit:
        """Claim chunk ``number``'s commit record as the shard's seal (see :meth:`Sink.seal`)."""
        where = {"run_id": run_id, "shard_id": shard_id, "chunk": number}
        what = f"seal shard {shard_id} in {self.target}"
        with (
            mapped_errors(what, self.engine.url, otherwise=ShardwiseError),
            self.engine.connect() as conn,
            write_transaction(conn),
        ):
            claim = {
                **where,
                "results_table": self.target,
                "position": encode_json(_SEALED),
                "committed_at": bind_timestamp(conn, utc_now()),
            }
            if conn.execute(statement(conn, "sink_commit_claim"), claim).first() is not None:
                return SinkCommit("sealed", {})
            found = self._stored(conn, run_id, shard_id, number)
        assert found is not None  # the conflicting row is committed: the claim waited for it
        return found

    def _stored(self, conn: sa.Connection, run_id: str, shard_id: int, number: int) -> SinkCommit | None:
        if not sa.inspect(conn).has_table("shardwise_commits"):
            return None
        where = {"run_id": run_id, "shard_id": shard_id, "chunk": number}
        row = conn.execute(statement(conn, "sink_commit_select"), where).one_or_none()
        if row is None:
            return None
        position = decode_json(row.position)
        if position == _SEALED:
            return SinkCommit("sealed", {})
        return SinkCommit("already", position, row.rows_inserted, row.rows_updated, row.rows_unchanged)

    def committed(self, run_id: str, shard_id: int, number: int) -> SinkCommit | None:
        action = f"read the commit of chunk {number} of shard {shard_id}"
        with mapped_errors(action, self.engine.url), self.engine.connect() as conn, conn.begin():
            return self._stored(conn, run_id, shard_id, number)

    def committed_inputs(self, model_version: str) -> Iterator[tuple[str, str]]:
        t = self.table
        stmt = sa.select(t.c.source_key, t.c.input_fingerprint).where(t.c.model_version == model_version)
        with mapped_errors(f"read the keys of {self.target}", self.engine.url), self.engine.connect() as conn:
            if not sa.inspect(conn).has_table(t.name, schema=t.schema):
                return
            for key, fingerprint in conn.execution_options(yield_per=10_000).execute(stmt):
                yield str(key), fingerprint

    def tidy(self, over: Callable[[str], bool | None]) -> list[str]:
        """Nothing to tidy: a chunk's commit is one transaction, which a killed writer's database rolls
        back (its staging table is temporary)."""
        return []

    def finish(self, run_id: str) -> list[str]:
        """With ``index="hnsw"``, build each vector output's HNSW index if it is absent; says what it
        built and in how long, or that it was there."""
        if self.index != "hnsw":
            return []
        table, done = self.table, []
        for out in self.layout.outputs:
            if out.kind == "vector":
                kind: VectorStorage = getattr(table.c[out.name].type, "type_name", "array")
                built = create_ann_index(self.engine, table, out.name, kind, self.metric)
                where = f"{self.target}({out.name})"
                done.append(
                    f"built HNSW index {built.name} on {where} in {built.seconds:.2f} s"
                    if built.created
                    else f"HNSW index {built.name} on {where} exists already"
                )
        return done

    def read(self, model_version: str | None = None) -> list[dict[str, Any]]:
        stmt = sa.select(self.table).order_by(self.table.c.source_key, self.table.c.model_version)
        if model_version is not None:
            stmt = stmt.where(self.table.c.model_version == model_version)
        with mapped_errors(f"read {self.target}", self.engine.url), self.engine.connect() as conn:
            return [dict(row) for row in conn.execute(stmt).mappings()]
