"""pgvector support for the SQL sink, in one import: column types, binary COPY, type choice, HNSW index.

Each concern lives in its own module; this one gathers their public names::

    pgvector_resolve  EmbeddingType, resolve_embedding_type   which column type (auto/array/vector/halfvec)
    pgvector_types    Vector, HalfVec, recognise_vector_types,  SQLAlchemy types, limits, reflection
                      reflected_vector_family, MAX_DIMS,
                      HNSW_MAX_DIMS
    pgvector_copy     register_vector_dumpers, copy_type_name   psycopg 3 binary COPY dumpers
    pgvector_index    create_ann_index, IndexBuild              HNSW index built concurrently

See docs/how-to/pgvector.md for the user's side.
"""

from __future__ import annotations

from shardwise.sinks.sql.pgvector_copy import (
    copy_type_name,
    pg_binary_halfvec,
    pg_binary_vector,
    register_vector_dumpers,
)
from shardwise.sinks.sql.pgvector_index import IndexBuild, IndexMetric, create_ann_index, hnsw_index_name
from shardwise.sinks.sql.pgvector_resolve import EmbeddingType, ResolvedEmbeddingType, resolve_embedding_type
from shardwise.sinks.sql.pgvector_types import (
    HNSW_MAX_DIMS,
    MAX_DIMS,
    HalfVec,
    Vector,
    VectorKind,
    recognise_vector_types,
    reflected_vector_family,
    vector_text,
)

__all__ = [
    "HNSW_MAX_DIMS",
    "MAX_DIMS",
    "EmbeddingType",
    "HalfVec",
    "IndexBuild",
    "IndexMetric",
    "ResolvedEmbeddingType",
    "Vector",
    "VectorKind",
    "copy_type_name",
    "create_ann_index",
    "hnsw_index_name",
    "pg_binary_halfvec",
    "pg_binary_vector",
    "recognise_vector_types",
    "reflected_vector_family",
    "register_vector_dumpers",
    "resolve_embedding_type",
    "vector_text",
]
