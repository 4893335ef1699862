"""The results store: the results table, the run ledger, and the exactly-once shard merge.

Start at :class:`Ledger` (runs, shards, dead letters, objects) and
:class:`ResultStore` (a results table, written through a ledger). A shard's
rows stream into a staging table as they are scored (:class:`ShardWriter`) and reach the results table in one
transaction that also stores the dead letters and marks the shard done.
"""

from __future__ import annotations

from shardwise.results.ledger import Ledger
from shardwise.results.merge import Lineage
from shardwise.results.outcomes import (
    MergeOutcome,
    RunCounts,
    RunSummary,
    ShardProgress,
    StoredDeadLetter,
    StoredShard,
)
from shardwise.results.records import DeadLetter, ResultRow, RunRecord, ShardReport
from shardwise.results.schema import parse_table_name
from shardwise.results.store import ResultStore, existing_key_type
from shardwise.results.writer import ShardWriter

__all__ = [
    "DeadLetter",
    "Ledger",
    "Lineage",
    "MergeOutcome",
    "ResultRow",
    "ResultStore",
    "RunCounts",
    "RunRecord",
    "RunSummary",
    "ShardProgress",
    "ShardReport",
    "ShardWriter",
    "StoredDeadLetter",
    "StoredShard",
    "existing_key_type",
    "parse_table_name",
]
