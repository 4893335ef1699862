"""Concurrency: racing writers of one shard, many shards in threads, lock conflicts as transient errors."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa
from results_helpers import (
    attempt_writer,
    brief,
    impatient_store,
    locked_out,
    make_plan,
    make_report,
    make_rows,
    make_run,
    make_store,
    nth_chunk,
    started_run,
    whole_chunk,
    write_lock_held,
    write_shard,
)

from shardwise.errors import RetryDeadlineError, TransientError
from shardwise.records import DeadLetter
from shardwise.results import MergeOutcome, ResultStore, read_marks


def test_two_writers_racing_on_one_shard_commit_once(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    barrier = threading.Barrier(2)

    def attempt(n: int) -> bool:
        with attempt_writer(store, run, 0, n) as writer:
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
    # The rows are one writer's, whole: the one whose sink commit landed first. The ledger's mark and
    # dead letters are the one that marked first (the same one, unless the other overtook it in between;
    # both scored the same rows in a real run).
    assert len({r["input_fingerprint"][-7:] for r in store.read_results()}) == 1
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
        with attempt_writer(store, run, 0, 1, brief(0)) as writer, write_lock_held(sqlite_url, 0.3):
            t0 = time.perf_counter()
            chunk = whole_chunk(make_rows(range(100)), [DeadLetter(500, "InputError", "empty")])
            # Staging goes to TEMP tables without the shared write lock; the merge waits for it
            # (the busy timeout) instead of failing, on its one try.
            assert writer.commit(chunk).status == "merged"
            assert time.perf_counter() - t0 >= 0.25
            assert writer.finish(make_report()) is not None
        assert store.count_results() == 100


@pytest.mark.postgres
def test_a_connection_dropped_mid_merge_is_transient_and_the_retry_merges_once(pg_url: str) -> None:
    with make_store(pg_url) as store:
        store.ensure_schema()
        run = make_run()
        store.ledger.start_run(run, make_plan())
        admin = sa.create_engine(pg_url)
        sink_engine = store.sink.engine  # type: ignore[attr-defined]

        def drop_own_backend(conn: sa.Connection, _cursor: Any, statement: str, *_: Any) -> None:
            if statement.lstrip().startswith("INSERT INTO docs_emb"):  # the merge itself
                pid = conn.connection.driver_connection.info.backend_pid  # type: ignore[union-attr]
                with admin.begin() as other:
                    other.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})

        sa.event.listen(sink_engine, "before_cursor_execute", drop_own_backend)
        # No retry (a deadline of 0): the dropped connection ends the attempt, and nothing is merged.
        with (
            pytest.raises(RetryDeadlineError, match="terminat"),
            attempt_writer(store, run, 0, 1, brief(0)) as writer,
        ):
            writer.start()
            writer.commit(whole_chunk(make_rows(range(10))))
        sa.event.remove(sink_engine, "before_cursor_execute", drop_own_backend)
        admin.dispose()
        assert store.count_results() == 0
        assert store.sink.committed(run.run_id, 0, 0) is None  # the claim rolled back with the merge
        assert write_shard(store, run, 0, make_rows(range(10)), attempt=2)
        assert store.count_results() == 10


def test_racing_writers_merge_each_chunk_once(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    barrier = threading.Barrier(2)

    def attempt(n: int) -> list[str]:
        with attempt_writer(store, run, 0, n, brief()) as writer:
            barrier.wait()
            statuses = [writer.commit(nth_chunk(i, salt=f"w{n}")).status for i in range(5)]
            return [*statuses, "finished" if writer.finish(make_report(n, 50)) else "skipped"]

    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(attempt, [1, 2]))
    merged = [[o[i] for o in outcomes].count("merged") for i in range(5)]
    assert merged == [1] * 5
    assert sorted(o[-1] for o in outcomes) == ["finished", "skipped"]
    assert store.count_results() == 50
    marks = read_marks(store.ledger, run.run_id)
    assert [m.chunk for m in marks] == list(range(5))
    writers: dict[int, set[str]] = {}
    for row in store.read_results():  # each chunk's rows are one writer's, whole
        writers.setdefault(row["source_key"] // 10, set()).add(row["input_fingerprint"][-2:])
    assert all(len(w) == 1 for w in writers.values()) and len(writers) == 5
    (shard, _) = store.ledger.shards(run.run_id)
    assert (shard.rows_in, shard.rows_inserted) == (50, 50)


def test_a_locked_database_costs_a_retry_of_the_chunk_step_not_the_chunk(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    run = started_run(sqlite_url, running=(0,))
    quick = impatient_store(sqlite_url, 50)
    caplog.set_level(logging.WARNING, logger="shardwise.retry_policy")
    with (
        quick,
        write_lock_held(sqlite_url, release_after_s=0.4),
        quick.chunk_writer(run, 0, 1, brief(10)) as writer,
    ):
        assert writer.commit(nth_chunk(0)).status == "merged"
    tries = [r.getMessage() for r in caplog.records]
    assert tries and "commit chunk 0 of shard 0 to docs_emb failed on try 1 (" in tries[0]
    assert "database is locked" in tries[0] and "given up 10 s in" in tries[0]
    with make_store(sqlite_url) as store:
        assert store.count_results() == 10


def test_the_retry_gives_up_at_the_deadline_naming_it(sqlite_url: str) -> None:
    run = started_run(sqlite_url, running=(0,))
    gives_up = "commit chunk 0 of shard 0 to docs_emb kept failing for .* the retry deadline of 0.5 s"
    with (
        locked_out(sqlite_url, 20) as quick,
        quick.chunk_writer(run, 0, 1, brief(0.5)) as writer,
        pytest.raises(RetryDeadlineError, match=gives_up) as caught,
    ):
        started = time.monotonic()
        writer.commit(nth_chunk(0))
    assert 0.5 <= time.monotonic() - started < 2.0
    assert "database is locked" in str(caught.value)
