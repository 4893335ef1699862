"""A results table's own options (``--embedding-type``, ``--index``, ``--index-metric``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shardwise.errors import ConfigError
from shardwise.sinks.registry import SinkOptions

__all__ = ["EmbeddingType", "IndexMetric", "SqlOptions"]

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
