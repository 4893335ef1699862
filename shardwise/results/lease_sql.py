"""Reads and writes of the ledger's leases and live counts, through the ``.sql`` files.

Like :mod:`~shardwise.results.ledger_sql`, every function takes a connection
inside a transaction the caller opened. Taking a run's lease is one
conditional UPDATE (``run_lease_take.sql``): of two processes resuming the
same run at once, exactly one updates the row, whatever either read before.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from shardwise.cost.budget import Budget
from shardwise.db.codec import bind_timestamp, decode_row, decode_timestamp
from shardwise.db.sqlfiles import statement
from shardwise.errors import ConfigError
from shardwise.results.leases import expiry, lease_held
from shardwise.results.outcomes import RunCounts, RunListing
from shardwise.results.owners import owner_gone

__all__ = [
    "live_counts",
    "live_shard_owners",
    "recent_runs",
    "renew_run_lease",
    "renew_shard_lease",
    "take_run_lease",
]


def take_run_lease(
    conn: sa.Connection, run_id: str, owner: str, lease_s: float, now: datetime, take_from: str | None
) -> None:
    """Take run ``run_id``'s lease for ``owner``, or raise the :class:`ConfigError` naming who holds it.

    It is taken when nobody holds it (never leased, or expired), when
    ``owner`` holds it already, or, forced, from ``take_from``: the owner the
    caller saw, so that of two forced takeovers at once only the first wins.
    """
    params = {
        "run_id": run_id,
        "owner": owner,
        "lease_expires_at": bind_timestamp(conn, expiry(lease_s, now)),
        "now": bind_timestamp(conn, now),
        "take_from": take_from,
    }
    if conn.execute(statement(conn, "run_lease_take"), params).rowcount == 1:
        return
    row = conn.execute(statement(conn, "run_select"), {"run_id": run_id}).mappings().one()
    raise ConfigError(
        lease_held(
            run_id, row["owner"], decode_timestamp(row["lease_expires_at"]), meanwhile=take_from is not None
        )
    )


def renew_run_lease(conn: sa.Connection, run_id: str, owner: str, lease_s: float, now: datetime) -> bool:
    """Extend ``owner``'s lease on a running run; False once it is not (taken over, or finished)."""
    params = {
        "run_id": run_id,
        "owner": owner,
        "lease_expires_at": bind_timestamp(conn, expiry(lease_s, now)),
    }
    return conn.execute(statement(conn, "run_lease_renew"), params).rowcount == 1


def renew_shard_lease(
    conn: sa.Connection, run_id: str, shard_id: int, attempt: int, owner: str, lease_s: float, now: datetime
) -> bool:
    """Extend the lease of ``owner``'s attempt at a shard; False once the attempt is not the current one."""
    params = {
        "run_id": run_id,
        "shard_id": shard_id,
        "attempt": attempt,
        "owner": owner,
        "lease_expires_at": bind_timestamp(conn, expiry(lease_s, now)),
    }
    return conn.execute(statement(conn, "shard_lease_renew"), params).rowcount == 1


def live_shard_owners(conn: sa.Connection, run_id: str, now: datetime) -> list[str]:
    """The workers that hold a live lease on an attempt at one of the run's shards now, those of this
    host that are gone left out (see :func:`~shardwise.results.owners.owner_gone`)."""
    params = {"run_id": run_id, "now": bind_timestamp(conn, now)}
    owners = conn.execute(statement(conn, "shard_leases_live"), params).scalars()
    return [owner for owner in owners if not owner_gone(owner)]


def live_counts(conn: sa.Connection, run_id: str, shards_total: int) -> RunCounts:
    """A running run's counts summed from its shards and their committed chunks now (``shardwise_runs``
    has them only once finished)."""
    row = conn.execute(statement(conn, "run_live_counts"), {"run_id": run_id}).mappings().one()
    counts: dict[str, Any] = {k: int(v) for k, v in row.items()}
    for name, rows in _pending_chunks(conn, run_id).get(run_id, {}).items():
        counts[name] += rows
    return RunCounts(shards_total=shards_total, **counts)


def _pending_chunks(conn: sa.Connection, run_id: str | None) -> dict[str, dict[str, int]]:
    """Rows of committed chunks of shards not done, per run (all runs for ``run_id`` None).

    A shard's rows are in its done counts only once it is done, but each
    committed chunk is in the results table already: a live count that left
    them out would lag a big shard by up to all of it.
    """
    found = conn.execute(statement(conn, "chunks_pending"), {"run_id": run_id}).mappings()
    return {r["run_id"]: {k: int(r[k]) for k in ("rows_in", "rows_out", "rows_failed")} for r in found}


def recent_runs(
    conn: sa.Connection,
    limit: int,
    now: datetime,
    status: str | None = None,
    results_table: str | None = None,
) -> list[RunListing]:
    """The latest ``limit`` runs, newest first: only those with ``status`` and ``results_table``, if given."""
    params: dict[str, Any] = {
        "limit": limit,
        "status": status,
        "results_table": results_table,
        "now": bind_timestamp(conn, now),
    }
    rows = conn.execute(statement(conn, "runs_recent"), params).mappings().all()
    pending = _pending_chunks(conn, None) if rows else {}
    return [_listing(row, pending.get(row["run_id"], {})) for row in rows]


def _listing(row: Any, pending: dict[str, int]) -> RunListing:
    """One listed run: counts as ints, with its pending chunks' rows; timestamps decoded (SQLite
    returns them as text); the budget it last ended under."""
    fields = decode_row(row, timestamps=["started_at", "finished_at", "lease_expires_at"])
    counts: dict[str, Any] = {n: int(fields.pop(n)) + pending.get(n, 0) for n in RunCounts.counters()}
    running = int(fields.pop("shards_running") or 0)
    usd, tokens = fields.pop("budget_usd"), fields.pop("budget_tokens")
    budget = Budget.of(None if usd is None else float(usd), None if tokens is None else int(tokens))
    return RunListing(**fields, counts=RunCounts(**counts), shards_running=running, budget=budget)
