"""The ledger's schema and its version; the run-level statements: start, summarise and finish a run;
seen objects.

A shard's own statements (its attempts, progress, done-mark and dead
letters) are in :mod:`shardwise.results.shard_sql`, leases in
:mod:`shardwise.results.lease_sql`, chunk marks in
:mod:`shardwise.results.chunk_marks`. Every function takes a connection
inside a transaction the caller opened
(:func:`shardwise.db.connect.write_transaction` for writes).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from shardwise.cost.budget import Budget
from shardwise.db.codec import bind_timestamp, decode_json, decode_timestamp, encode_json
from shardwise.db.sqlfiles import load_script, statement
from shardwise.errors import ConfigError, RunTakenOverError
from shardwise.records import RunRecord
from shardwise.results import lease_sql, shard_states
from shardwise.results.outcomes import RunCounts, RunSummary
from shardwise.results.schema import (
    LEDGER_SCHEMA_VERSION,
    LEDGER_TABLES,
    VERSION_TABLE,
    check_ledger_version,
)
from shardwise.sources.base import SourcePlan

__all__ = [
    "check_version",
    "create_ledger",
    "finish_run",
    "record_objects",
    "run_summary",
    "seen_objects",
    "start_run",
]


def create_ledger(conn: sa.Connection, shown: str) -> None:
    """Create the ledger tables and record their schema version, in the caller's transaction (under
    ``schema_lock.sql`` on PostgreSQL); a ledger made by another layout is refused first (see
    :func:`check_version`), with ``shown``, its redacted URL. Idempotent: a ledger that exists is kept.
    """
    check_version(conn, shown)
    for stmt in load_script(conn.dialect.name, "ledger_schema"):
        conn.exec_driver_sql(stmt)
    conn.execute(statement(conn, "ledger_version_record"), {"version": LEDGER_SCHEMA_VERSION})


def check_version(conn: sa.Connection, shown: str) -> bool:
    """Whether the ledger exists here: True when its tables do, at this build's schema version; False
    when none does yet. A ledger whose tables exist at another version, or without one (a build
    before versions made it), raises a :class:`ConfigError` naming ``shown`` and how to start anew."""
    tables = set(sa.inspect(conn).get_table_names())
    if not tables & set(LEDGER_TABLES):
        return False
    found = conn.execute(statement(conn, "ledger_version")).scalars().all() if VERSION_TABLE in tables else []
    check_ledger_version(shown, [int(v) for v in found])
    return True


def start_run(
    conn: sa.Connection,
    run: RunRecord,
    plan: SourcePlan,
    now: datetime,
    lease: tuple[str, float, str | None] | None = None,
) -> SourcePlan:
    """Insert the run and its pending shards, or resume it; returns the plan stored with the run.

    A resumed run keeps its first plan (shard boundaries never move under a
    run) and its done shards; its failed shards go back to pending. With
    ``lease`` (owner, seconds, the owner to take it from by force or None)
    the run's lease is taken first, or a :class:`ConfigError` names who
    holds it and nothing changes (see :func:`lease_sql.take_run_lease`).
    """
    triggered_by = run.started_by.split(":", 1)[1] if run.started_by.startswith("event:") else None
    conn.execute(
        statement(conn, "run_insert"),
        {
            "run_id": run.run_id,
            "started_by": run.started_by,
            "triggered_by": triggered_by,
            "parameters": encode_json(run.parameters),
            "model_name": run.model_name,
            "model_version": run.model_version,
            "precision": run.precision,
            "precision_agreement": run.precision_agreement,
            "precision_agreement_from": run.precision_agreement_from,
            "code_version": run.code_version,
            "source_identity": run.source_identity,
            "source_snapshot": run.source_snapshot,
            "results_table": run.results_table,
            "plan": plan.to_json(),
            "started_at": bind_timestamp(conn, now),
            "shards_total": len(plan.shards),
        },
    )
    stored = conn.execute(statement(conn, "run_lock"), {"run_id": run.run_id}).one()
    if (stored.model_version, stored.results_table) != (run.model_version, run.results_table):
        raise ConfigError(
            f"run {run.run_id!r} was started with model version {stored.model_version[:12]} into "
            f"{stored.results_table!r}; it cannot resume with model version {run.model_version[:12]} into "
            f"{run.results_table!r}. Start a new run instead"
        )
    if lease is not None:
        lease_sql.take_run_lease(conn, run.run_id, lease[0], lease[1], now, lease[2])
    conn.execute(statement(conn, "run_resume"), {"run_id": run.run_id})
    shard_states.reset_failed(conn, run.run_id, now)
    kept = SourcePlan.from_json(stored.plan)
    shards = [
        {
            "run_id": run.run_id,
            "shard_id": s.shard_id,
            "bounds": encode_json(s.bounds),
            "expected_rows": s.expected_rows,
        }
        for s in kept.shards
    ]
    if shards:
        conn.execute(statement(conn, "shard_insert"), shards)
    return kept


def run_summary(conn: sa.Connection, run_id: str) -> tuple[RunSummary, SourcePlan] | None:
    row = conn.execute(statement(conn, "run_select"), {"run_id": run_id}).mappings().one_or_none()
    if row is None:
        return None
    record = RunRecord(
        run_id=row["run_id"],
        started_by=row["started_by"],
        parameters=decode_json(row["parameters"]),
        model_name=row["model_name"],
        model_version=row["model_version"],
        precision=row["precision"],
        precision_agreement=row["precision_agreement"],
        precision_agreement_from=row["precision_agreement_from"],
        code_version=row["code_version"],
        source_identity=row["source_identity"],
        source_snapshot=row["source_snapshot"],
        results_table=row["results_table"],
    )
    if row["status"] == "running":  # its stored counters are written only when it finishes
        counts = lease_sql.live_counts(conn, run_id, int(row["shards_total"]))
    else:
        stored: dict[str, Any] = {f: int(row[f]) for f in RunCounts.counters()}
        counts = RunCounts(**stored)
    summary = RunSummary(
        record=record,
        status=row["status"],
        triggered_by=row["triggered_by"],
        started_at=decode_timestamp(row["started_at"]),
        finished_at=decode_timestamp(row["finished_at"]),
        counts=counts,
        owner=row["owner"],
        lease_expires_at=decode_timestamp(row["lease_expires_at"]),
    )
    return summary, SourcePlan.from_json(row["plan"])


def runs_of_source(
    conn: sa.Connection, source_identity: str, results_table: str
) -> list[tuple[str, SourcePlan]]:
    """Every run that read ``source_identity`` into ``results_table``, oldest first, with its plan."""
    where = {"source_identity": source_identity, "results_table": results_table}
    rows = conn.execute(statement(conn, "runs_of_source"), where)
    return [(run_id, SourcePlan.from_json(plan)) for run_id, plan in rows]


def finish_run(
    conn: sa.Connection, run_id: str, status: str, now: datetime, owner: str | None = None
) -> None:
    """Close the run and release its lease; only ``owner``'s, when given (see run_finish.sql): a
    :class:`RunTakenOverError` when another owner took it over meanwhile."""
    params = {"run_id": run_id, "status": status, "finished_at": bind_timestamp(conn, now), "owner": owner}
    if conn.execute(statement(conn, "run_finish"), params).rowcount == 1:
        return
    row = conn.execute(statement(conn, "run_select"), {"run_id": run_id}).mappings().one_or_none()
    if row is None:
        raise ConfigError(f"run {run_id!r} is not in shardwise_runs; start_run must come before finish_run")
    raise RunTakenOverError(
        f"run {run_id!r} was taken over by {row['owner']} (resume --force) while {owner} ran it, so "
        "that process finishes it; the shards this one merged stay merged"
    )


def record_budget(conn: sa.Connection, run_id: str, budget: Budget | None) -> None:
    """Record the budget the invocation finishing run ``run_id`` ran under (None: none), in place of an
    earlier invocation's: a resume may change it."""
    params = {
        "run_id": run_id,
        "budget_usd": None if budget is None else budget.usd,
        "budget_tokens": None if budget is None else budget.tokens,
    }
    conn.execute(statement(conn, "run_budget_record"), params)


def seen_objects(
    conn: sa.Connection, source_identity: str, destination: str | None
) -> frozenset[tuple[str, str]]:
    """(object key, ETag) pairs completed runs scored from ``source_identity`` into ``destination`` (a
    run's ``results_table``); with None, those scored into every destination that read the source."""
    name = "objects_seen" if destination is not None else "objects_seen_everywhere"
    where = {"source_identity": source_identity, "destination": destination}
    rows = conn.execute(statement(conn, name), where)
    return frozenset((str(r[0]), str(r[1])) for r in rows)


def record_objects(
    conn: sa.Connection, run_id: str, source_identity: str, objects: Iterable[tuple[str, str]], now: datetime
) -> None:
    """Remember the pairs run ``run_id`` scored, under its source and its destination (the results it
    recorded, ``shardwise_runs.results_table``): another destination of the same source has not seen them."""
    found = conn.execute(statement(conn, "run_select"), {"run_id": run_id}).mappings().one_or_none()
    if found is None:
        raise ConfigError(
            f"run {run_id!r} is not in shardwise_runs; start_run must come before record_objects"
        )
    base = {
        "source_identity": source_identity,
        "destination": found["results_table"],
        "run_id": run_id,
        "seen_at": bind_timestamp(conn, now),
    }
    params = [{**base, "object_key": key, "etag": etag} for key, etag in objects]
    if params:
        conn.execute(statement(conn, "object_insert"), params)
