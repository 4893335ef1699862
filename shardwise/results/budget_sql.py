"""The budget holds of a run's shards (``shardwise_budget_holds``): a chunk reserved against the budget.

The DDL is in ``sql/common/ledger_schema.sql``; the rule a reservation
follows is :func:`shardwise.cost.budget.decide`. Every function takes a
connection inside a write transaction the caller opened.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

import sqlalchemy as sa

from shardwise.cost.budget import Hold
from shardwise.cost.usage import RunUsage
from shardwise.db.codec import bind_timestamp
from shardwise.db.sqlfiles import statement
from shardwise.results import usage_sql
from shardwise.results.owners import owner_gone

__all__ = ["reserve_chunk"]


def reserve_chunk(
    conn: sa.Connection,
    run_id: str,
    shard_id: int,
    attempt: int,
    owner: str,
    chunk: int,
    decide: Callable[[RunUsage, Sequence[Hold]], Hold | None],
    now: datetime,
) -> bool:
    """Hold ``chunk`` of ``owner``'s attempt at a shard at what ``decide`` returns, given the run's
    committed usage and the other shards' live holds; False, holding nothing, when it returns None.

    The run's row is locked first (``BEGIN IMMEDIATE`` on SQLite), so two
    reservations of one run never both read before either holds. The holds
    are read before the committed usage: a chunk committed between the two
    reads counts twice (the safe side), never not at all.
    """
    conn.execute(statement(conn, "run_lock"), {"run_id": run_id}).first()
    params = {"run_id": run_id, "shard_id": shard_id, "now": bind_timestamp(conn, now)}
    found = conn.execute(statement(conn, "budget_holds_live"), params).mappings().all()
    others = [Hold(float(r["cost_usd"]), int(r["tokens"])) for r in found if not owner_gone(r["owner"])]
    hold = decide(usage_sql.run_usage(conn, run_id), others)
    if hold is None:
        return False
    held = {
        "run_id": run_id,
        "shard_id": shard_id,
        "attempt": attempt,
        "owner": owner,
        "chunk": chunk,
        "cost_usd": float(hold.cost_usd),
        "tokens": int(hold.tokens),
        "held_at": bind_timestamp(conn, now),
    }
    conn.execute(statement(conn, "budget_hold_upsert"), held)
    return True
