"""A shard's statements on the ledger: its progress, dead letters, and the reads of its row.

The worker side of the ledger: what a shard attempt writes as it runs and
merges, and the reads of those rows. What changes a shard's status (an
attempt starting, done, retrying, failed) is
:mod:`shardwise.results.shard_states`, the one module that does. Every
function takes a connection inside a transaction the caller opened, so a
chunk's merge, its dead letters and the shard's done-mark can share one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import sqlalchemy as sa

from shardwise.db.codec import bind_timestamp, decode_row, encode_json, key_text
from shardwise.db.sqlfiles import statement
from shardwise.errors import ConfigError
from shardwise.records import DeadLetter
from shardwise.results.outcomes import ShardProgress, StoredDeadLetter, StoredShard

__all__ = [
    "dead_letters",
    "done_shards",
    "insert_dead_letters",
    "lock_shard",
    "record_progress",
    "shard_progress",
    "shard_status",
    "shards",
]


def done_shards(conn: sa.Connection, run_id: str) -> set[int]:
    return {int(r[0]) for r in conn.execute(statement(conn, "shards_done"), {"run_id": run_id})}


def shard_status(conn: sa.Connection, run_id: str, shard_id: int) -> str:
    """The shard's status, unlocked; a :class:`ConfigError` when the plan has no such shard."""
    return _status(conn, "shard_status", run_id, shard_id)


def lock_shard(conn: sa.Connection, run_id: str, shard_id: int) -> str:
    """Lock the shard's ledger row for this transaction and return its status."""
    return _status(conn, "shard_lock", run_id, shard_id)


def _status(conn: sa.Connection, name: str, run_id: str, shard_id: int) -> str:
    status = conn.execute(
        statement(conn, name), {"run_id": run_id, "shard_id": shard_id}
    ).scalar_one_or_none()
    if status is None:
        raise ConfigError(
            f"shard {shard_id} is not in run {run_id!r}'s plan; call start_run(run, plan) before "
            "writing shards, and use the shard ids of the plan it returns"
        )
    return str(status)


def insert_dead_letters(
    conn: sa.Connection,
    run_id: str,
    shard_id: int,
    attempt: int,
    results_table: str,
    now: datetime,
    letters: Sequence[DeadLetter],
) -> None:
    """Store a chunk's dead letters (keys stored as text); call it in the ledger transaction that marks
    the chunk."""
    base = {
        "run_id": run_id,
        "shard_id": shard_id,
        "attempt": attempt,
        "created_at": bind_timestamp(conn, now),
        "results_table": results_table,
    }
    params = [
        {
            **base,
            "source_key": key_text(dl.key),  # type: ignore[arg-type]
            "error_class": dl.error_class,
            "message": dl.message,
            "input_fingerprint": dl.input_fingerprint,
        }
        for dl in letters
    ]
    if params:
        conn.execute(statement(conn, "dead_letters_insert"), params)


def record_progress(
    conn: sa.Connection,
    run_id: str,
    shard_id: int,
    attempt: int,
    rows: int,
    failed: int,
    now: datetime,
    counts: Mapping[str, int] | None = None,
) -> bool:
    """Record how far ``attempt`` has got; False when it is no longer current (or the row is busy)."""
    params = {"run_id": run_id, "shard_id": shard_id, "attempt": attempt, "rows": rows, "failed": failed}
    params["counts"] = encode_json(counts) if counts else None
    at = bind_timestamp(conn, now)
    return conn.execute(statement(conn, "shard_progress"), {**params, "progress_at": at}).rowcount == 1


def shard_progress(conn: sa.Connection, run_id: str) -> list[ShardProgress]:
    rows = conn.execute(statement(conn, "shards_progress"), {"run_id": run_id}).mappings()
    return [ShardProgress(**decode_row(r, json_columns=["progress_counts"])) for r in rows]


def shards(conn: sa.Connection, run_id: str) -> list[StoredShard]:
    rows = conn.execute(statement(conn, "shards_select"), {"run_id": run_id}).mappings()
    decoded = (decode_row(r, timestamps=["started_at", "finished_at"], json_columns=["engine"]) for r in rows)
    return [StoredShard(**fields) for fields in decoded]


def dead_letters(conn: sa.Connection, run_id: str) -> list[StoredDeadLetter]:
    rows = conn.execute(statement(conn, "dead_letters_select"), {"run_id": run_id}).mappings()
    return [StoredDeadLetter(**decode_row(r, timestamps=["created_at"])) for r in rows]
