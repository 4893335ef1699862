"""An HNSW index on a results table's pgvector column (``--index hnsw --index-metric cosine|l2|ip``).

The index is built ``CREATE INDEX CONCURRENTLY``, in autocommit (it cannot
run inside a transaction), so writers merging into the table are not
blocked while it builds. Its name is fixed by (table, column, metric), so a
second run finds it and leaves it be. A concurrent build that was killed or
failed leaves an INVALID index of that name behind (``pg_index.indisvalid``
false): it is dropped, concurrently too, and built again. The build is the one
statement of the sink with no time bound (:func:`~shardwise.db.timeouts.unbounded`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Literal, get_args

import sqlalchemy as sa

from shardwise.db.errors import mapped_errors
from shardwise.db.timeouts import unbounded
from shardwise.errors import ConfigError
from shardwise.sinks.sql.options import IndexMetric
from shardwise.sinks.sql.pgvector_types import HNSW_MAX_DIMS, reflected_vector_family

__all__ = ["IndexBuild", "IndexMetric", "create_ann_index", "hnsw_index_name"]


_log = logging.getLogger(__name__)
_OPS = {"cosine": "cosine_ops", "l2": "l2_ops", "ip": "ip_ops"}
_MAX_IDENT = 63
_VALIDITY = sa.text(
    "SELECT i.indisvalid FROM pg_index i"
    " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE c.relname = :name AND n.nspname = coalesce(:schema, current_schema())"
)


@dataclass(frozen=True)
class IndexBuild:
    """What :func:`create_ann_index` did: the index's name, whether it built it, and how long that took."""

    name: str
    created: bool
    seconds: float


def hnsw_index_name(table: str, column: str, metric: IndexMetric) -> str:
    """``<table>_<column>_hnsw_<metric>``; past PostgreSQL's 63 characters, cut and given a hash suffix."""
    name = f"{table}_{column}_hnsw_{metric}"
    if len(name) <= _MAX_IDENT:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: _MAX_IDENT - 9]}_{digest}"


def create_ann_index(
    engine: sa.Engine,
    table: sa.Table,
    column: str,
    kind: Literal["array", "vector", "halfvec"],
    metric: IndexMetric,
) -> IndexBuild:
    """Make sure an HNSW index for ``metric`` covers ``table.column``; build it concurrently if needed.

    ``kind`` is the column's resolved embedding type: ``array`` (``real[]``)
    is refused, as is a column wider than HNSW's limit (2000 dimensions for
    ``vector``, 4000 for ``halfvec``). The column's real type and width are
    read from the database, which must hold the table.
    """
    if metric not in _OPS:
        raise ConfigError(f"--index-metric {metric!r} is not one of: {', '.join(get_args(IndexMetric))}")
    if kind not in HNSW_MAX_DIMS:
        raise ConfigError(
            f"--index hnsw needs a pgvector column; {table.name}.{column} is stored as real[] "
            f"(embedding type {kind!r}). Use --embedding-type vector or halfvec, or auto on a database "
            "with pgvector, or drop --index hnsw"
        )
    name = hnsw_index_name(table.name, column, metric)
    url = engine.url
    action = f"build HNSW index {name} on {table.name}({column})"
    with (
        mapped_errors(action, url),
        engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn,
        unbounded(conn),  # a build may rightly take hours: no statement timeout, no answer bound
    ):
        dim = _column_dim(conn, table, column, kind)
        _check_dim(table.name, column, kind, dim)
        valid = conn.execute(_VALIDITY, {"name": name, "schema": table.schema}).scalar_one_or_none()
        if valid:
            return IndexBuild(name, created=False, seconds=0.0)
        index = _index(table, column, kind, metric, name)
        if valid is not None:
            _log.warning("dropping INVALID index %s left by an interrupted build, to build it again", name)
            conn.execute(sa.schema.DropIndex(index, if_exists=True))
        started = time.perf_counter()
        conn.execute(sa.schema.CreateIndex(index, if_not_exists=True))
        seconds = time.perf_counter() - started
    _log.info("built HNSW index %s on %s(%s) in %.2f s", name, table.name, column, seconds)
    return IndexBuild(name, created=True, seconds=seconds)


def _column_dim(conn: sa.Connection, table: sa.Table, column: str, kind: str) -> int:
    """The column's dimension count from the catalogue; ConfigError if it is not a ``kind`` column."""
    families = reflected_vector_family(conn, table.name, table.schema)
    family = families.get(column, "")
    if not family.startswith(f"{kind}(") or not family.endswith(")"):
        found = family or "not a pgvector column (or missing)"
        raise ConfigError(
            f"--index hnsw expected {table.name}.{column} to be a {kind}(n) column; it is {found}. "
            "Check --results-table and --embedding-type against the existing table"
        )
    return int(family[len(kind) + 1 : -1])


def _check_dim(table: str, column: str, kind: Literal["vector", "halfvec"], dim: int) -> None:
    limit = HNSW_MAX_DIMS[kind]
    if dim <= limit:
        return
    fix = (
        f"use --embedding-type halfvec (HNSW covers up to {HNSW_MAX_DIMS['halfvec']} dimensions)"
        if kind == "vector" and dim <= HNSW_MAX_DIMS["halfvec"]
        else "use a model with fewer dimensions"
    )
    raise ConfigError(
        f"an HNSW index covers {kind} columns of at most {limit} dimensions; {table}.{column} has {dim}. "
        f"Drop --index hnsw (exact search still works), or {fix}"
    )


def _index(table: sa.Table, column: str, kind: str, metric: IndexMetric, name: str) -> sa.Index:
    """The index on a stand-in table, so the caller's ``sa.Table`` does not gain it."""
    stand_in = sa.Table(
        table.name, sa.MetaData(), sa.Column(column, sa.types.NullType()), schema=table.schema
    )
    return sa.Index(
        name,
        stand_in.c[column],
        postgresql_using="hnsw",
        postgresql_ops={column: f"{kind}_{_OPS[metric]}"},
        postgresql_concurrently=True,
    )
