"""Live shard progress in the ledger: written per attempt, read per run, never waiting on a busy database."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa
from results_helpers import make_plan, make_rows, make_run, write_shard

from shardwise.errors import TransientError
from shardwise.results import Ledger, ResultStore, ShardProgress
from shardwise.results.sqlfiles import load_script

PROGRESS_COLUMNS = {"progress_rows", "progress_failed", "progress_at", "progress_counts"}


def _old_ledger(url: str) -> None:
    """The ledger as a release before live progress made it: the same DDL without the progress columns,
    and chunk marks without the sums of count outputs."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for stmt in load_script(conn.dialect.name, "ledger_schema"):
            conn.exec_driver_sql("\n".join(ln for ln in stmt.splitlines() if "progress_" not in ln))
        for stmt in load_script(conn.dialect.name, "chunks_schema"):
            conn.exec_driver_sql(
                "\n".join(ln for ln in stmt.splitlines() if not ln.strip().startswith("counts"))
            )
        assert not PROGRESS_COLUMNS & {c["name"] for c in sa.inspect(conn).get_columns("shardwise_shards")}
        assert "counts" not in {c["name"] for c in sa.inspect(conn).get_columns("shardwise_chunks")}
    engine.dispose()


def test_an_old_ledger_gains_the_progress_columns_and_its_runs_report(db_url: str) -> None:
    _old_ledger(db_url)
    run = make_run()
    with Ledger(db_url) as ledger:
        ledger.start_run(run, make_plan(2))  # a run the older release started
        ledger.ensure()
        ledger.ensure()  # idempotent
        with ledger.reading("inspect") as conn:
            columns = {c["name"] for c in sa.inspect(conn).get_columns("shardwise_shards")}
            chunk_columns = {c["name"] for c in sa.inspect(conn).get_columns("shardwise_chunks")}
        assert columns >= PROGRESS_COLUMNS and "counts" in chunk_columns
        assert ledger.record_attempt(run.run_id, 0) == 1
        assert ledger.record_progress(run.run_id, 0, 1, rows=7, failed=1, counts={"completion_tokens": 40})
        assert ledger.shard_progress(run.run_id) == [
            ShardProgress(0, "running", 10, None, None, 7, 1, {"completion_tokens": 40}),
            ShardProgress(1, "pending", 10, None, None, None, None),
        ]


def test_progress_belongs_to_the_current_attempt_of_a_running_shard(store: ResultStore) -> None:
    ledger, run = store.ledger, make_run()
    ledger.start_run(run, make_plan(2))
    assert ledger.record_attempt(run.run_id, 0) == 1
    assert ledger.record_progress(run.run_id, 0, 1, rows=5, failed=0, counts={"prompt_tokens": 9})
    assert ledger.record_attempt(run.run_id, 0) == 2
    again = ledger.shard_progress(run.run_id)[0]
    assert (again.progress_rows, again.progress_counts) == (0, {}), "a new attempt starts from zero"
    assert not ledger.record_progress(run.run_id, 0, 1, rows=9, failed=0), "a stale attempt may not write"
    assert ledger.record_progress(run.run_id, 0, 2, rows=3, failed=1)
    assert write_shard(store, run, 0, make_rows(range(10)), attempt=2)
    assert not ledger.record_progress(run.run_id, 0, 2, rows=10, failed=1), "a done shard stays as merged"
    done = ledger.shard_progress(run.run_id)[0]
    assert (done.status, done.rows_in, done.rows_failed) == ("done", 10, 0)


def test_a_busy_sqlite_database_skips_the_report_at_once(sqlite_url: str) -> None:
    run = make_run()
    with Ledger(sqlite_url) as ledger:
        ledger.ensure()
        ledger.start_run(run, make_plan(1))
        attempt = ledger.record_attempt(run.run_id, 0)
        assert attempt == 1
        other = sa.create_engine(sqlite_url)
        with other.connect() as holder:
            holder.exec_driver_sql("BEGIN IMMEDIATE")  # a merge holding the write lock
            started = time.monotonic()
            with pytest.raises(TransientError, match="locked"):
                ledger.record_progress(run.run_id, 0, attempt, rows=1, failed=0)
            assert time.monotonic() - started < 5, "a progress write must not queue behind a merge"
            holder.exec_driver_sql("ROLLBACK")
        other.dispose()
        with ledger.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 60000, "pooled waits restored"
        assert ledger.record_progress(run.run_id, 0, attempt, rows=1, failed=0)


@pytest.mark.postgres
def test_a_locked_postgres_shard_row_skips_the_report_at_once(pg_url: str) -> None:
    run = make_run()
    with Ledger(pg_url) as ledger:
        ledger.ensure()
        ledger.start_run(run, make_plan(1))
        assert ledger.record_attempt(run.run_id, 0) == 1
        with ledger.writing("hold the shard row") as holder:
            holder.exec_driver_sql(
                "SELECT status FROM shardwise_shards WHERE run_id = %(r)s AND shard_id = 0 FOR UPDATE",
                {"r": run.run_id},
            )
            started = time.monotonic()
            assert not ledger.record_progress(run.run_id, 0, 1, rows=1, failed=0)
            assert time.monotonic() - started < 5
        assert ledger.record_progress(run.run_id, 0, 1, rows=1, failed=0)
