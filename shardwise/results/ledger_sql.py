"""The ledger's schema and the run-level statements: start, summarise and finish a run; seen objects.

A shard's own statements (its attempts, progress, done-mark and dead
letters) are in :mod:`shardwise.results.shard_sql`, leases in
:mod:`shardwise.results.lease_sql`, chunk marks in
:mod:`shardwise.results.chunk_marks`. Every function takes a connection
inside a transaction the caller opened
(:func:`shardwise.results.connect.write_transaction` for writes).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from shardwise.errors import ConfigError, RunTakenOverError
from shardwise.results import lease_sql, shard_states
from shardwise.results.codec import bind_timestamp, decode_json, decode_timestamp, encode_json
from shardwise.results.outcomes import RunCounts, RunSummary
from shardwise.results.records import RunRecord
from shardwise.results.sqlfiles import load_script, load_sql, statement
from shardwise.sources.base import SourcePlan

__all__ = ["create_ledger", "finish_run", "record_objects", "run_summary", "seen_objects", "start_run"]


_UPGRADES = {
    "shardwise_runs": {
        "precision": "runs_add_precision",
        "precision_agreement": "runs_add_precision_agreement",
        "precision_agreement_from": "runs_add_precision_agreement_from",
        "owner": "runs_add_owner",
        "lease_expires_at": "runs_add_lease",
    },
    "shardwise_shards": {
        "progress_counts": "shards_add_progress_counts",
        "progress_rows": "shards_add_progress_rows",
        "progress_failed": "shards_add_progress_failed",
        "progress_at": "shards_add_progress_at",
        "owner": "shards_add_owner",
        "lease_expires_at": "shards_add_lease",
    },
    "shardwise_chunks": {"counts": "chunks_add_counts"},
}
"""Columns each ledger table gained after its first release, and the file adding each to an older ledger."""


def create_ledger(conn: sa.Connection) -> None:
    """Create the ledger tables, and bring an older ledger up to date: the columns it lacks, and the
    shard statuses running and retrying (:func:`_add_shard_states`)."""
    for stmt in load_script(conn.dialect.name, "ledger_schema"):
        conn.exec_driver_sql(stmt)
    for stmt in load_script(conn.dialect.name, "chunks_schema"):  # shardwise.results.chunk_marks
        conn.exec_driver_sql(stmt)
    for stmt in load_script(conn.dialect.name, "shard_transitions_schema"):  # shard_states
        conn.exec_driver_sql(stmt)
    inspector = sa.inspect(conn)
    for table, upgrades in _UPGRADES.items():
        have = {c["name"] for c in inspector.get_columns(table)}
        for column, upgrade in upgrades.items():
            if column not in have:
                conn.execute(statement(conn, upgrade))
    _add_shard_states(conn)
    _add_object_destination(conn)


def _add_object_destination(conn: sa.Connection) -> None:
    """Key an older ledger's seen objects by destination too (see :func:`seen_objects`); a ledger that
    has the column is left alone.

    Each stored pair is filed under the results of the run that recorded it
    (``shardwise_runs.results_table``): that run scored the object into those,
    and only those, so the next only-new run into them skips it as before, and
    one into another destination scores it. PostgreSQL adds the column and
    changes the key in place; SQLite cannot change a primary key, so the table
    is rebuilt in this transaction, as :func:`_add_shard_states` does.
    """
    if "destination" in {c["name"] for c in sa.inspect(conn).get_columns("shardwise_objects")}:
        return
    if conn.dialect.name == "postgresql":
        for stmt in load_script("postgresql", "objects_add_destination"):
            conn.exec_driver_sql(stmt)
        return
    conn.exec_driver_sql(load_sql("sqlite", "objects_add_destination"))
    for stmt in load_script("sqlite", "ledger_schema"):  # creates shardwise_objects as it is now
        conn.exec_driver_sql(stmt)
    for stmt in load_script("sqlite", "objects_copy_destination"):
        conn.exec_driver_sql(stmt)


def _add_shard_states(conn: sa.Connection) -> None:
    """Widen an older ledger's CHECK on ``shardwise_shards.status`` to the statuses of
    :mod:`~shardwise.results.shard_states`; a ledger that has them is left alone.

    PostgreSQL changes the constraint in place. SQLite cannot change a CHECK,
    so the table is rebuilt, in this transaction: moved aside, created again
    from ``ledger_schema.sql`` (the one definition), its rows copied over by
    column name, and the old one dropped. Stored rows keep their statuses
    (pending, done, failed), which the new CHECK allows.
    """
    found = conn.execute(statement(conn, "shards_status_check")).scalar()
    if found is None or "retrying" in str(found):
        return
    if conn.dialect.name == "postgresql":
        for stmt in load_script("postgresql", "shards_add_states"):
            conn.exec_driver_sql(stmt)
        return
    for stmt in load_script("sqlite", "shards_add_states"):
        conn.exec_driver_sql(stmt)
    for stmt in load_script("sqlite", "ledger_schema"):  # creates shardwise_shards as it is now
        conn.exec_driver_sql(stmt)
    old = sa.Table("shardwise_shards_before_states", sa.MetaData(), autoload_with=conn)
    new = sa.Table("shardwise_shards", sa.MetaData(), autoload_with=conn)
    columns = [c.name for c in old.columns if c.name in new.columns]
    conn.execute(new.insert().from_select(columns, sa.select(*(old.c[name] for name in columns))))
    conn.exec_driver_sql(load_sql("sqlite", "shards_drop_old"))


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
        precision=row.get("precision") or "fp32",
        precision_agreement=row.get("precision_agreement"),
        precision_agreement_from=row.get("precision_agreement_from"),
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
        owner=row.get("owner"),
        lease_expires_at=decode_timestamp(row.get("lease_expires_at")),
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


def seen_objects(
    conn: sa.Connection, source_identity: str, destination: str | None
) -> frozenset[tuple[str, str]]:
    """(object key, ETag) pairs completed runs scored from ``source_identity`` into ``destination`` (a
    run's ``results_table``); with None, those scored into every destination that read the source.

    A ledger not upgraded yet (read by a dry run or a watcher, which change
    nothing) files each pair under the results of the run that recorded it,
    as the upgrade (:func:`_add_object_destination`) will.
    """
    upgraded = "destination" in {c["name"] for c in sa.inspect(conn).get_columns("shardwise_objects")}
    name = "objects_seen" if destination is not None else "objects_seen_everywhere"
    query_name = name if upgraded else f"{name}_before_destination"
    where = {"source_identity": source_identity, "destination": destination}
    rows = conn.execute(statement(conn, query_name), where)
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
