"""A shard's status, the one place that changes it, and the history of every change.

::

    pending ──────────► running ──► done
    running ──► retrying ──► running        a transient failure, then the next try
    pending | running | retrying ──► failed no try is coming
    failed ──► pending                      a resume

=========  ===========================================================================
pending    planned (or returned by a resume); no attempt at it is under way
running    an attempt is under way: counted, leased by its worker
retrying   a try failed with a transient error and another try is coming
done       merged, with its counts: final
failed     no try is coming; ``--resume`` returns it to pending
=========  ===========================================================================

The legal moves are :data:`TRANSITIONS`:

* ``pending → running``, ``retrying → running``: an attempt starts.
  ``running → running``: a newer attempt takes the shard over from one whose
  worker died or was presumed dead (a cluster's rerun, a takeover).
* ``running → retrying``, ``pending → retrying``, ``retrying → retrying``: a
  try failed, transiently, and another is coming (the task's retry policy
  said so). From pending: the try failed before its attempt was counted.
* ``running → done``: the attempt's last chunk is marked.
* ``pending | running | retrying → failed``: no try is coming (a permanent
  error, the retry deadline, the attempts spent, a worker pool that broke
  before the shard started).
* ``failed → pending``: a resume.

``done`` is final: a failure reported for a done shard (a late report, a
racing worker) changes nothing and answers False, and an attempt asked for
a done shard answers None, as the callers expect. A second failure report
for a failed shard changes nothing either, and nor does a failure reported
by a worker for a running shard whose current attempt is another worker's
(its own attempt was taken over: the report is stale). Every other move raises
:class:`~shardwise.errors.ShardStateError`: scoring a failed shard without a
resume, a done-mark for a shard no attempt is running, a shard going back
to pending but by a resume.

Each change locks the shard's row (``shard_state_lock.sql``), checks the
move, updates ``shardwise_shards`` (status, attempts, last error, times) and
inserts one row into ``shardwise_shard_transitions`` (from, to, attempt,
when, worker, error), all in the caller's transaction. Before this module,
a shard's row said ``failed`` after every failed try, retried or not; now
``failed`` means no try is coming.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

import sqlalchemy as sa

from shardwise.db.codec import bind_timestamp, decode_row, encode_json
from shardwise.db.sqlfiles import statement
from shardwise.errors import ConfigError, ShardStateError
from shardwise.records import ShardReport
from shardwise.results.leases import expiry

__all__ = [
    "SHARD_STATUSES",
    "TRANSITIONS",
    "ShardStatus",
    "ShardTransition",
    "check_transition",
    "mark_done",
    "mark_failed",
    "mark_retrying",
    "reset_failed",
    "start_attempt",
    "status_counts",
    "transitions",
]

ShardStatus = Literal["pending", "running", "retrying", "done", "failed"]
SHARD_STATUSES: tuple[ShardStatus, ...] = get_args(ShardStatus)

TRANSITIONS: Mapping[ShardStatus, frozenset[ShardStatus]] = {
    "pending": frozenset({"running", "retrying", "failed"}),
    "running": frozenset({"running", "retrying", "done", "failed"}),
    "retrying": frozenset({"running", "retrying", "failed"}),
    "failed": frozenset({"pending"}),
    "done": frozenset(),
}
"""The moves a shard may make, from each status; see the module docstring."""

_ERROR_CHARS = 10_000


@dataclass(frozen=True, slots=True)
class ShardTransition:
    """One row of ``shardwise_shard_transitions``: a shard's move, by which attempt, when, and why."""

    run_id: str
    shard_id: int
    attempt: int
    from_status: str
    to_status: str
    at: datetime | None
    worker: str | None = None
    error: str | None = None


def check_transition(run_id: str, shard_id: int, current: str, target: ShardStatus) -> None:
    """Raise :class:`ShardStateError` unless a shard in ``current`` may move to ``target``."""
    allowed = TRANSITIONS.get(current, frozenset())  # type: ignore[call-overload]
    if target in allowed:
        return
    if current == "done":
        why = "done is final"
    elif target == "done":
        why = "a shard is marked done by the attempt running it: record the attempt first"
    elif target == "pending":
        why = "only a resume returns a shard to pending, and only a failed one"
    elif current == "failed":
        why = "a failed shard is scored again only after a resume (--resume RUN_ID) returns it to pending"
    else:
        why = f"{target} does not follow {current}"
    listed = ", ".join(sorted(allowed)) or "none"
    raise ShardStateError(
        f"shard {shard_id} of run {run_id!r} cannot go from {current} to {target}: {why}; from {current} "
        f"it may go to: {listed}"
    )


def start_attempt(
    conn: sa.Connection,
    run_id: str,
    shard_id: int,
    now: datetime,
    *,
    host: str | None = None,
    device: str | None = None,
    owner: str | None = None,
    lease_s: float | None = None,
) -> int | None:
    """Count an attempt as it starts (→ ``running``) and return its number; None when the shard is done.

    With ``owner`` and ``lease_s`` the worker takes the attempt's lease (no lease without them).
    """
    current, _, _ = _lock(conn, run_id, shard_id)
    if current == "done":
        return None
    check_transition(run_id, shard_id, current, "running")
    params = {"run_id": run_id, "shard_id": shard_id, "started_at": bind_timestamp(conn, now), "owner": owner}
    params["lease_expires_at"] = None if lease_s is None else bind_timestamp(conn, expiry(lease_s, now))
    attempt = int(
        conn.execute(
            statement(conn, "shard_attempt"), {**params, "host": host, "device": device}
        ).scalar_one()
    )
    _record(conn, run_id, shard_id, attempt, current, "running", now, owner)
    return attempt


def mark_retrying(
    conn: sa.Connection, run_id: str, shard_id: int, error: str, now: datetime, worker: str | None = None
) -> bool:
    """A try failed and another is coming (→ ``retrying``); False when the shard is done, or when
    ``worker`` reports for a running shard whose current attempt is another worker's."""
    current, attempts, owner = _lock(conn, run_id, shard_id)
    if current == "done" or _stale(current, owner, worker):
        return False
    check_transition(run_id, shard_id, current, "retrying")
    params = {"run_id": run_id, "shard_id": shard_id, "error": error[:_ERROR_CHARS]}
    conn.execute(statement(conn, "shard_retrying"), params)
    _record(conn, run_id, shard_id, attempts, current, "retrying", now, worker, error)
    return True


def mark_failed(
    conn: sa.Connection, run_id: str, shard_id: int, error: str, now: datetime, worker: str | None = None
) -> bool:
    """No try is coming (→ ``failed``), with the last error; False when the shard was done or failed,
    or when ``worker`` reports for a running shard whose current attempt is another worker's."""
    current, attempts, owner = _lock(conn, run_id, shard_id)
    if current in ("done", "failed") or _stale(current, owner, worker):
        return False
    check_transition(run_id, shard_id, current, "failed")
    params = {"run_id": run_id, "shard_id": shard_id, "finished_at": bind_timestamp(conn, now)}
    conn.execute(statement(conn, "shard_failed"), {**params, "error": error[:_ERROR_CHARS]})
    _record(conn, run_id, shard_id, attempts, current, "failed", now, worker, error)
    return True


def mark_done(
    conn: sa.Connection, run_id: str, shard_id: int, report: ShardReport, merged: Mapping[str, int]
) -> None:
    """Record the report on the shard's row and mark it done (→ ``done``); ``merged`` holds the merge's
    split. The engine figures' ``counts`` (the shard's count outputs) become its last progress too."""
    current, _, _ = _lock(conn, run_id, shard_id)
    check_transition(run_id, shard_id, current, "done")
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
    worker = engine.get("worker")
    _record(conn, run_id, shard_id, report.attempt, current, "done", report.finished_at, worker)


def reset_failed(conn: sa.Connection, run_id: str, now: datetime) -> list[int]:
    """A resume: every failed shard of the run goes back to pending (→ ``pending``); their ids."""
    failed = conn.execute(statement(conn, "shards_failed"), {"run_id": run_id}).all()
    if failed:
        conn.execute(statement(conn, "shards_reset_failed"), {"run_id": run_id})
    for shard_id, attempts in failed:
        _record(conn, run_id, int(shard_id), int(attempts), "failed", "pending", now, None)
    return [int(shard_id) for shard_id, _ in failed]


def transitions(conn: sa.Connection, run_id: str, shard_id: int | None = None) -> list[ShardTransition]:
    """The run's shard transitions (one shard's, with ``shard_id``) in the order they happened."""
    rows = conn.execute(
        statement(conn, "shard_transitions_select"), {"run_id": run_id, "shard_id": shard_id}
    ).mappings()
    return [ShardTransition(**decode_row(r, timestamps=["at"])) for r in rows]


def status_counts(conn: sa.Connection, run_ids: Iterable[str]) -> dict[str, dict[str, int]]:
    """How many shards of each run are in each status: ``{run_id: {"done": 4, "retrying": 1}}``."""
    wanted = list(run_ids)
    if not wanted:
        return {}
    query = statement(conn, "shard_states_count").bindparams(sa.bindparam("run_ids", expanding=True))
    counts: dict[str, dict[str, int]] = {run_id: {} for run_id in wanted}
    for run_id, status, shards in conn.execute(query, {"run_ids": wanted}):
        counts[run_id][str(status)] = int(shards)
    return counts


def _stale(current: str, owner: str | None, worker: str | None) -> bool:
    """Whether ``worker``'s failure report is about an attempt no longer current: the shard runs
    another worker's attempt. The flow's own reports name no worker and are never stale."""
    return current == "running" and None not in (owner, worker) and owner != worker


def _lock(conn: sa.Connection, run_id: str, shard_id: int) -> tuple[str, int, str | None]:
    """The shard's row locked for the transaction: its status, attempts so far and current owner."""
    row = conn.execute(statement(conn, "shard_state_lock"), {"run_id": run_id, "shard_id": shard_id}).first()
    if row is None:
        raise ConfigError(
            f"shard {shard_id} is not in run {run_id!r}'s plan; call start_run(run, plan) before "
            "writing shards, and use the shard ids of the plan it returns"
        )
    return str(row[0]), int(row[1]), row[2]


def _record(
    conn: sa.Connection,
    run_id: str,
    shard_id: int,
    attempt: int,
    from_status: str,
    to_status: ShardStatus,
    at: datetime,
    worker: str | None,
    error: str | None = None,
) -> None:
    conn.execute(
        statement(conn, "shard_transition_insert"),
        {
            "run_id": run_id,
            "shard_id": shard_id,
            "attempt": attempt,
            "from_status": from_status,
            "to_status": to_status,
            "at": bind_timestamp(conn, at),
            "worker": worker,
            "error": None if error is None else error[:_ERROR_CHARS],
        },
    )
