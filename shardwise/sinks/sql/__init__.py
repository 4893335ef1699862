"""The SQL sink kind: results in a database table, PostgreSQL (with pgvector for vectors) or SQLite.

:mod:`.kind` is the registry entry and :mod:`.options` its options; the folder holds the sink
(:mod:`.sink`), the results table's layout and its check (:mod:`.table`), how a chunk's rows are
staged (:mod:`.staging`) and merged (:mod:`.merge`), and pgvector's column types, binary copy and ANN
index (:mod:`.pgvector` and its parts).
"""

from __future__ import annotations

from shardwise.sinks.sql.kind import KIND, SqlKind
from shardwise.sinks.sql.options import EmbeddingType, IndexMetric, SqlOptions

__all__ = ["KIND", "EmbeddingType", "IndexMetric", "SqlKind", "SqlOptions"]
