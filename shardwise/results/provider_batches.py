"""The provider batches of ``shardwise_provider_batches``: one row per batch a window of rows became.

A remote model with ``--batch-api`` submits a window as provider batches;
each batch's id is inserted here in its own transaction before the run waits
on it, so a resumed or retried shard collects the same batches instead of
paying for them again (see :mod:`shardwise.model.recorded`). The DDL and
queries are in ``sql/`` (``ledger_schema.sql``, ``provider_batch*.sql``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from shardwise.db.codec import bind_timestamp, decode_timestamp
from shardwise.db.sqlfiles import statement
from shardwise.model.recorded import ProviderBatch

__all__ = ["StoredProviderBatch", "batch_ended", "insert_batch", "run_batches", "window_batches"]


@dataclass(frozen=True)
class StoredProviderBatch:
    """One row of ``shardwise_provider_batches``: where its window is, and the batch."""

    run_id: str
    shard_id: int
    window_key: str
    position: int
    first_key: str
    batch: ProviderBatch
    ended_at: datetime | None


def insert_batch(
    conn: sa.Connection,
    run_id: str,
    shard_id: int,
    window: tuple[str, int, str],
    batch: ProviderBatch,
) -> bool:
    """Record ``batch`` of the window ``(window_key, position, first_key)``; False when that window's
    batch of the same index was recorded already (a racing writer's is kept)."""
    window_key, position, first_key = window
    inserted = conn.execute(
        statement(conn, "provider_batch_insert"),
        {
            "run_id": run_id,
            "shard_id": shard_id,
            "window_key": window_key,
            "batch_index": batch.batch_index,
            "position": position,
            "first_key": first_key,
            "rows_sent": batch.rows_sent,
            "provider": batch.provider,
            "batch_id": batch.batch_id,
            "submitted_at": bind_timestamp(conn, batch.submitted_at),
        },
    ).first()
    return inserted is not None


def batch_ended(
    conn: sa.Connection,
    run_id: str,
    shard_id: int,
    window_key: str,
    batch_index: int,
    status: str,
    now: datetime,
) -> None:
    conn.execute(
        statement(conn, "provider_batch_ended"),
        {
            "run_id": run_id,
            "shard_id": shard_id,
            "window_key": window_key,
            "batch_index": batch_index,
            "status": status,
            "ended_at": bind_timestamp(conn, now),
        },
    )


def window_batches(
    conn: sa.Connection, run_id: str, shard_id: int, window_key: str
) -> list[StoredProviderBatch]:
    rows = conn.execute(
        statement(conn, "provider_batches_select"),
        {"run_id": run_id, "shard_id": shard_id, "window_key": window_key},
    ).mappings()
    return [_stored(row) for row in rows]


def run_batches(conn: sa.Connection, run_id: str) -> list[StoredProviderBatch]:
    rows = conn.execute(statement(conn, "provider_batches_of_run"), {"run_id": run_id}).mappings()
    return [_stored(row) for row in rows]


def _stored(row: sa.RowMapping) -> StoredProviderBatch:
    submitted = decode_timestamp(row["submitted_at"])
    assert submitted is not None  # NOT NULL
    batch = ProviderBatch(
        int(row["batch_index"]),
        str(row["provider"]),
        str(row["batch_id"]),
        int(row["rows_sent"]),
        submitted,
        str(row["status"]),
    )
    return StoredProviderBatch(
        str(row["run_id"]),
        int(row["shard_id"]),
        str(row["window_key"]),
        int(row["position"]),
        str(row["first_key"]),
        batch,
        decode_timestamp(row["ended_at"]),
    )
