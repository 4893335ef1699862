"""A shard's statements on the ledger: its attempts, progress, done or failed mark, and dead letters.

The worker side of the ledger: what a shard attempt writes as it starts,
runs and merges, and the reads of those rows. Every function takes a
connection inside a transaction the caller opened, so a chunk's merge, its
dead letters and the shard's done-mark can share one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from shardwise.errors import ConfigError
from shardwise.results.codec import bind_timestamp, decode_row, encode_json, key_text
from shardwise.results.leases import expiry
from shardwise.results.outcomes import ShardProgress, StoredDeadLetter, StoredShard
from shardwise.results.records import DeadLetter, ShardReport
from shardwise.results.sqlfiles import statement

__all__ = [
    "dead_letters",
    "done_shards",
    "insert_dead_letters",
    "lock_shard",
    "mark_shard_done",
    "mark_shard_failed",
    "record_attempt",
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


def mark_shard_done(
    conn: sa.Connection, run_id: str, shard_id: int, report: ShardReport, merged: Mapping[str, int]
) -> None:
    """Record the report on the shard's row and mark it done; ``merged`` holds the merge's split.

    The engine figures' ``counts`` (the shard's count outputs) become its last progress too.
    """
    engine: Mapping[str, Any] = report.engine
    conn.execute(
        statement(conn, "shard_done"),
        {
            "run_id": run_id,
            "shard_id": shard_id,
            "attempt": report.attempt,
            "rows_in": report.rows_in,
            "rows_out": report.rows_out,
            "rows_failed": report.rows_failed,
            "rows_inserted": merged["inserted"],
            "rows_updated": merged["updated"],
            "rows_unchanged": merged["unchanged"],
            "started_at": bind_timestamp(conn, report.started_at),
            "finished_at": bind_timestamp(conn, report.finished_at),
            "host": report.host,
            "device": report.device,
            "padding_efficiency": engine.get("padding_efficiency"),
            "tokens_per_s": engine.get("tokens_per_s"),
            "oom_splits": engine.get("oom_splits"),
            "engine": encode_json(engine),
            "progress_counts": encode_json(engine["counts"]) if engine.get("counts") else None,
        },
    )


def record_attempt(
    conn: sa.Connection,
    run_id: str,
    shard_id: int,
    host: str | None,
    device: str | None,
    now: datetime,
    owner: str | None = None,
    lease_s: float | None = None,
) -> int | None:
    """Count an attempt at a shard as it starts; its number, or None when the shard is done.

    With ``owner`` and ``lease_s`` the worker takes the attempt's lease (no lease without them).
    """
    params = {"run_id": run_id, "shard_id": shard_id, "started_at": bind_timestamp(conn, now), "owner": owner}
    params["lease_expires_at"] = None if lease_s is None else bind_timestamp(conn, expiry(lease_s, now))
    found = conn.execute(
        statement(conn, "shard_attempt"), {**params, "host": host, "device": device}
    ).scalar()
    return None if found is None else int(found)


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


def mark_shard_failed(conn: sa.Connection, run_id: str, shard_id: int, error: str, now: datetime) -> bool:
    params = {"run_id": run_id, "shard_id": shard_id, "finished_at": bind_timestamp(conn, now)}
    return conn.execute(statement(conn, "shard_failed"), {**params, "error": error[:10_000]}).rowcount == 1


def shards(conn: sa.Connection, run_id: str) -> list[StoredShard]:
    rows = conn.execute(statement(conn, "shards_select"), {"run_id": run_id}).mappings()
    decoded = (decode_row(r, timestamps=["started_at", "finished_at"], json_columns=["engine"]) for r in rows)
    return [StoredShard(**fields) for fields in decoded]


def dead_letters(conn: sa.Connection, run_id: str) -> list[StoredDeadLetter]:
    rows = conn.execute(statement(conn, "dead_letters_select"), {"run_id": run_id}).mappings()
    return [StoredDeadLetter(**decode_row(r, timestamps=["created_at"])) for r in rows]
