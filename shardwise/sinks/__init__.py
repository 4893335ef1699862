"""Sinks: where a run's results go (a SQL table, pgvector, Delta Lake, Parquet files), each committing
a chunk exactly once; see :mod:`shardwise.sinks.base` for the seam."""

from __future__ import annotations

from shardwise.sinks.base import Layout, Lineage, Sink, SinkChunk, SinkCommit, last_per_key

__all__ = ["Layout", "Lineage", "Sink", "SinkChunk", "SinkCommit", "last_per_key"]
