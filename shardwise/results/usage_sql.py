"""The chunks' usage rows (``shardwise_chunk_usage``): written with each chunk's mark, summed per run.

The DDL is in ``sql/common/ledger_schema.sql``; what the figures mean is
in :mod:`shardwise.cost.usage`. Every function takes a connection inside a
transaction the caller opened.
"""

from __future__ import annotations

import sqlalchemy as sa

from shardwise.cost.usage import ChunkUsage, RunUsage
from shardwise.db.sqlfiles import statement
from shardwise.results import chunk_marks

__all__ = ["USAGE_TABLE", "insert_usage", "run_usage"]

USAGE_TABLE = "shardwise_chunk_usage"


def insert_usage(conn: sa.Connection, run_id: str, shard_id: int, chunk: int, usage: ChunkUsage) -> None:
    """Record a chunk's usage; call it in the transaction that merges the chunk and writes its mark."""
    params = {
        "run_id": run_id,
        "shard_id": shard_id,
        "chunk": chunk,
        "device": usage.device,
        "device_s": float(usage.device_s),
        "cost_usd": None if usage.cost_usd is None else float(usage.cost_usd),
    }
    conn.execute(statement(conn, "chunk_usage_insert"), params)


def run_usage(conn: sa.Connection, run_id: str) -> RunUsage:
    """The run's usage over every chunk committed: rows and count outputs from the chunk marks, device
    time and cost from their usage rows (a chunk marked from a sink's record has none)."""
    rows = int(conn.execute(statement(conn, "run_chunk_rows"), {"run_id": run_id}).scalar_one())
    found = conn.execute(statement(conn, "run_usage"), {"run_id": run_id}).mappings().all()
    costs = [float(r["cost_usd"]) for r in found if r["cost_usd"] is not None]
    return RunUsage(
        rows=rows,
        counts=chunk_marks.run_counts(conn, run_id),
        device_s={str(r["device"]): float(r["device_s"]) for r in found},
        cost_usd=sum(costs) if costs else None,
        unpriced=sum(int(r["unpriced"]) for r in found),
        chunks=sum(int(r["chunks"]) for r in found),
    )
