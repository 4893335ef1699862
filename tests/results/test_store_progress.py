"""Live shard progress in the ledger: written per attempt, read per run, never waiting on a busy database."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa
from results_helpers import make_plan, make_rows, make_run, write_shard

from shardwise.errors import TransientError
from shardwise.results import Ledger, ResultStore


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
