"""The run ledger, and the exactly-once commit of a shard's chunks to a sink.

Start at :class:`Ledger` (runs, shards, chunk marks, dead letters, objects)
and :class:`ResultStore` (a ledger with the :class:`~shardwise.sinks.Sink`
a run writes to). A shard's rows are scored in chunks; each chunk is
committed to the sink once, then marked in the ledger with its dead letters
(:class:`ChunkWriter`), and the shard is marked done after its last chunk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardwise.lazy import DECLARED, lazy_exports

if TYPE_CHECKING:
    from shardwise.results.chunk_marks import ChunkMark, ChunkStart, ChunkTotals, read_marks
    from shardwise.results.chunk_writer import Chunk, ChunkCommit, ChunkWriter
    from shardwise.results.ledger import Ledger
    from shardwise.results.outcomes import (
        MergeOutcome,
        RunCounts,
        RunListing,
        RunSummary,
        ShardProgress,
        StoredDeadLetter,
        StoredShard,
    )
    from shardwise.results.shard_states import SHARD_STATUSES, ShardStatus, ShardTransition
    from shardwise.results.store import ResultStore
    from shardwise.sinks.base import Lineage

__all__ = [
    "SHARD_STATUSES",
    "Chunk",
    "ChunkCommit",
    "ChunkMark",
    "ChunkStart",
    "ChunkTotals",
    "ChunkWriter",
    "Ledger",
    "Lineage",
    "MergeOutcome",
    "ResultStore",
    "RunCounts",
    "RunListing",
    "RunSummary",
    "ShardProgress",
    "ShardStatus",
    "ShardTransition",
    "StoredDeadLetter",
    "StoredShard",
    "read_marks",
]

# Each name's module loads on first use: the ledger and the chunk writer bring SQLAlchemy and psycopg,
# and the run spec reads only the lease limits (shardwise.results.leases).
__getattr__ = lazy_exports(
    __name__,
    {
        ".chunk_marks": ("ChunkMark", "ChunkStart", "ChunkTotals", "read_marks"),
        ".chunk_writer": ("Chunk", "ChunkCommit", "ChunkWriter"),
        ".ledger": ("Ledger",),
        ".outcomes": DECLARED,
        ".shard_states": ("SHARD_STATUSES", "ShardStatus", "ShardTransition"),
        ".store": ("ResultStore",),
        "shardwise.sinks.base": ("Lineage",),
    },
)
