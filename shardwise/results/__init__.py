"""The results store: the results table, the run ledger, and the exactly-once shard merge.

Start at :class:`Ledger` (runs, shards, dead letters, objects) and
:class:`ResultStore` (a results table, written through a ledger). A shard's
rows are scored in chunks; each chunk reaches the results table in one transaction that also
stores its dead letters and its chunk mark (:class:`ChunkWriter`), and the shard is marked done
after its last chunk.
"""

from __future__ import annotations

from shardwise.results.chunk_marks import ChunkMark, ChunkStart, ChunkTotals, read_marks
from shardwise.results.chunk_writer import Chunk, ChunkCommit, ChunkWriter
from shardwise.results.db_retry import DbRetry
from shardwise.results.ledger import Ledger
from shardwise.results.merge import Lineage
from shardwise.results.outcomes import (
    MergeOutcome,
    RunCounts,
    RunListing,
    RunSummary,
    ShardProgress,
    StoredDeadLetter,
    StoredShard,
)
from shardwise.results.records import DeadLetter, ResultRow, RunRecord, ShardReport
from shardwise.results.schema import parse_table_name
from shardwise.results.store import ResultStore, existing_key_type

__all__ = [
    "Chunk",
    "ChunkCommit",
    "ChunkMark",
    "ChunkStart",
    "ChunkTotals",
    "ChunkWriter",
    "DbRetry",
    "DeadLetter",
    "Ledger",
    "Lineage",
    "MergeOutcome",
    "ResultRow",
    "ResultStore",
    "RunCounts",
    "RunListing",
    "RunRecord",
    "RunSummary",
    "ShardProgress",
    "ShardReport",
    "StoredDeadLetter",
    "StoredShard",
    "existing_key_type",
    "parse_table_name",
    "read_marks",
]
