"""The results store: the results table, the run ledger, and the exactly-once shard merge.

Start at :class:`ResultStore`. A shard's rows stream into a staging table as
they are scored (:class:`ShardWriter`) and reach the results table in one
transaction that also stores the dead letters and marks the shard done.
"""

from __future__ import annotations

from shardwise.results.merge import Lineage
from shardwise.results.outcomes import MergeOutcome, RunCounts, RunSummary, StoredDeadLetter
from shardwise.results.records import DeadLetter, ResultRow, RunRecord, ShardReport
from shardwise.results.schema import parse_table_name
from shardwise.results.store import ResultStore
from shardwise.results.writer import ShardWriter

__all__ = [
    "DeadLetter",
    "Lineage",
    "MergeOutcome",
    "ResultRow",
    "ResultStore",
    "RunCounts",
    "RunRecord",
    "RunSummary",
    "ShardReport",
    "ShardWriter",
    "StoredDeadLetter",
    "parse_table_name",
]
