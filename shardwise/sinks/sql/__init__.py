"""The SQL sink kind: results in a database table, PostgreSQL (with pgvector for vectors) or SQLite.

The folder holds the sink (:mod:`.sink`), the results table's layout and its
check (:mod:`.table`), how a chunk's rows are staged (:mod:`.staging`) and
merged (:mod:`.merge`), and pgvector's column types, binary copy and ANN
index (:mod:`.pgvector` and its parts). This module is the kind's registry
entry and its options; it imports no database driver, so listing the kinds
(``--help``) stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from shardwise.errors import ConfigError
from shardwise.sinks.registry import Destination, SinkOptions

if TYPE_CHECKING:
    from shardwise.model import OutputColumn
    from shardwise.retry_policy import RetryPolicy
    from shardwise.sinks.base import Layout, Sink

__all__ = ["KIND", "EmbeddingType", "IndexMetric", "SqlKind", "SqlOptions"]

EmbeddingType = Literal["auto", "array", "vector", "halfvec"]
"""How vector outputs are stored (``--embedding-type``): see :mod:`.pgvector_resolve`."""
IndexMetric = Literal["cosine", "l2", "ip"]
"""The distance of an HNSW index (``--index-metric``): see :mod:`.pgvector_index`."""


class SqlOptions(SinkOptions):
    """A results table's own options: how PostgreSQL stores vectors, and the ANN index built after."""

    embedding_type: EmbeddingType = Field(
        "auto",
        description="How PostgreSQL stores vector outputs: vector or halfvec (pgvector; halfvec halves "
        "the storage), array (real[]), or auto: an existing table's type, else vector where the pgvector "
        "extension is (or may be created), else real[].",
    )
    index: Literal["none", "hnsw"] = Field(
        "none",
        description="hnsw: build a pgvector HNSW index on each vector output once the run committed "
        "(if absent; its build time is logged).",
    )
    index_metric: IndexMetric = Field(
        "cosine",
        description="The HNSW index's distance: cosine, l2 (Euclidean) or ip (inner product); another than "
        "cosine is refused without index hnsw.",
    )

    def check(self) -> None:
        if self.index_metric != "cosine" and self.index == "none":
            raise ConfigError(
                f"index_metric {self.index_metric!r} is the distance of an HNSW index, and index is 'none', "
                "so no index is built; give --index hnsw, or drop --index-metric"
            )
        if self.index != "none" and self.embedding_type == "array":
            raise ConfigError(
                "index hnsw needs pgvector columns, and embedding_type 'array' stores real[]; give "
                "--embedding-type vector, halfvec or auto, or drop --index"
            )


class SqlKind:
    """Results in a database table: PostgreSQL (with pgvector for vectors) or SQLite."""

    name = "sql"
    label = "a database table (PostgreSQL, pgvector, SQLite)"
    extra = None
    schemes = ("postgresql", "postgres", "sqlite")
    options = SqlOptions

    def require(self) -> None:
        """SQLAlchemy and psycopg are core dependencies."""

    def target(self, dest: Destination) -> str:
        return dest.table

    def check(self, dest: Destination, options: SinkOptions) -> None:
        from shardwise.sinks.naming import parse_table_name

        parse_table_name(dest.table)

    def check_outputs(self, options: SinkOptions, model: str, outputs: tuple[OutputColumn, ...]) -> None:
        assert isinstance(options, SqlOptions)
        given = [
            f"--{name.replace('_', '-')} {getattr(options, name)}"
            for name, unset in (("embedding_type", "auto"), ("index", "none"))
            if getattr(options, name) != unset
        ]
        if given and not any(column.kind == "vector" for column in outputs):
            shown, verb = ", ".join(column.name for column in outputs), "store" if given[1:] else "stores"
            raise ConfigError(
                f"{' and '.join(given)} {verb} vector outputs, and model {model!r} writes none "
                f"({shown}); drop {' and '.join(g.split()[0] for g in given)}, or give an embedding model"
            )

    def same_database(self, dest: Destination, url: str) -> bool:
        if "://" not in url or url.split("://", 1)[0].split("+", 1)[0].lower() not in self.schemes:
            return False
        return _database_of(dest.location) == _database_of(url)

    def open(self, dest: Destination, layout: Layout, options: SinkOptions, retry: RetryPolicy) -> Sink:
        assert isinstance(options, SqlOptions)
        from shardwise.sinks.sql.sink import SqlSink

        return SqlSink(
            dest.location,
            dest.table,
            layout,
            embedding=options.embedding_type,
            index=options.index,
            metric=options.index_metric,
            timeout_s=retry.db_timeout_s,
        )


def _database_of(url: str) -> str:
    """A URL without its credentials and query, to compare which database two URLs name."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    return f"{parsed.get_backend_name()}://{parsed.host or ''}:{parsed.port or ''}/{parsed.database or ''}"


KIND = SqlKind()
"""The ``sql`` entry of the ``shardwise.sinks`` entry-point group."""
