"""Concurrency: racing writers of one shard, many shards in threads, lock conflicts as transient errors."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa
from results_helpers import (
    locked_out,
    make_plan,
    make_report,
    make_rows,
    make_run,
    make_store,
    started_run,
    whole_chunk,
    write_lock_held,
    write_shard,
)

from shardwise.errors import TransientError
from shardwise.results import DbRetry, DeadLetter, MergeOutcome, ResultStore


def test_two_writers_racing_on_one_shard_commit_once(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    barrier = threading.Barrier(2)

    def attempt(n: int) -> bool:
        with store.chunk_writer(run, 0, n) as writer:
            rows = make_rows(range(10), fp_salt=f"writer{n}")
            chunk = whole_chunk(rows, [DeadLetter(100, "InputError", f"from writer {n}")])
            barrier.wait()
            merged = writer.commit(chunk).status == "merged"
            writer.finish(make_report(n))
            return merged

    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(attempt, [1, 2]))
    assert sorted(outcomes) == [False, True]
    winner = 1 if outcomes[0] else 2
    assert store.count_results() == 10
    assert {r["input_fingerprint"][-7:] for r in store.read_results()} == {f"writer{winner}"}
    assert [d.attempt for d in store.ledger.dead_letters(run.run_id)] == [winner]


def test_many_shards_in_threads_all_merge(store: ResultStore) -> None:
    shards, per = 12, 50
    run = make_run()
    store.ledger.start_run(run, make_plan(shards, per))

    def shard(i: int) -> MergeOutcome:
        return write_shard(store, run, i, make_rows(range(i * per, (i + 1) * per)))

    with ThreadPoolExecutor(6) as pool:
        outcomes = list(pool.map(shard, range(shards)))
    assert all(outcomes)
    assert store.count_results() == shards * per
    assert store.ledger.done_shards(run.run_id) == set(range(shards))


def test_an_sqlite_lock_held_past_the_busy_timeout_is_transient(sqlite_url: str) -> None:
    run = started_run(sqlite_url)
    with locked_out(sqlite_url, 50) as quick, pytest.raises(TransientError, match="database is locked"):
        quick.ledger.mark_shard_failed(run.run_id, 0, "boom")


def test_sqlite_writers_stage_while_another_holds_the_write_lock(sqlite_url: str) -> None:
    run = started_run(sqlite_url)
    with make_store(sqlite_url) as store:
        with store.chunk_writer(run, 0, 1, DbRetry(tries=1)) as writer, write_lock_held(sqlite_url, 0.3):
            t0 = time.perf_counter()
            chunk = whole_chunk(make_rows(range(100)), [DeadLetter(500, "InputError", "empty")])
            # Staging goes to TEMP tables without the shared write lock; the merge waits for it
            # (the busy timeout) instead of failing, on its one try.
            assert writer.commit(chunk).status == "merged"
            assert time.perf_counter() - t0 >= 0.25
            assert writer.finish(make_report()) is not None
        assert store.count_results() == 100


@pytest.mark.postgres
def test_a_connection_dropped_mid_shard_is_transient_and_the_retry_merges_once(pg_url: str) -> None:
    with make_store(pg_url) as store:
        store.ensure_schema()
        run = make_run()
        store.ledger.start_run(run, make_plan())
        admin = sa.create_engine(pg_url)
        with pytest.raises(TransientError), store.chunk_writer(run, 0, 1, DbRetry(tries=1)) as writer:
            writer.start()
            assert writer._conn is not None
            pid = writer._conn.connection.driver_connection.info.backend_pid  # type: ignore[union-attr]
            with admin.begin() as conn:
                conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            writer.commit(whole_chunk(make_rows(range(10))))
        admin.dispose()
        assert store.count_results() == 0
        assert write_shard(store, run, 0, make_rows(range(10)), attempt=2)
        assert store.count_results() == 10
