"""Chunk by chunk: each chunk merged exactly once with its mark, the done-mark summing every chunk."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from results_helpers import (
    impatient_store,
    locked_out,
    make_plan,
    make_report,
    make_rows,
    make_run,
    make_store,
    started_run,
    write_lock_held,
    write_shard,
)

from shardwise.results import (
    Chunk,
    ChunkCommit,
    ChunkStart,
    DbRetry,
    DeadLetter,
    ResultStore,
    RunCounts,
    read_marks,
)

QUICK = DbRetry(tries=4, backoff_s=0.05)


def chunk(number: int, per: int = 10, salt: str = "", dead: int = 0) -> Chunk:
    """Chunk ``number``: keys ``number*per ..`` scored, then ``dead`` dead letters keyed above 1000."""
    keys = range(number * per, (number + 1) * per)
    letters = [DeadLetter(1000 + number * per + i, "InputError", "empty") for i in range(dead)]
    last = letters[-1].key if letters else keys[-1]
    position = {"rows": (number + 1) * (per + dead), "key": last}
    return Chunk(number, make_rows(keys, fp_salt=salt), letters, int(3 in keys), position)


def test_a_chunk_commits_once_and_a_second_writer_of_it_changes_nothing(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    with store.chunk_writer(run, 0, 1, QUICK) as first, store.chunk_writer(run, 0, 2, QUICK) as second:
        assert first.commit(chunk(0, dead=1)).status == "merged"
        again = second.commit(chunk(0, salt="second", dead=1))
    assert again == ChunkCommit("already", stored_position={"rows": 11, "key": 1000})
    assert store.count_results() == 10
    assert {r["input_fingerprint"] for r in store.read_results()} == {f"fp-{k}" for k in range(10)}
    assert [d.attempt for d in store.ledger.dead_letters(run.run_id)] == [1]
    assert [(m.chunk, m.attempt, m.rows_in, m.rows_failed) for m in read_marks(store.ledger, run.run_id)] == [
        (0, 1, 11, 1)
    ]


def test_a_later_attempt_starts_after_the_last_chunk_and_the_done_mark_counts_all(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    with store.chunk_writer(run, 0, 1, QUICK) as writer:
        assert writer.start() == ChunkStart()
        writer.commit(chunk(0, dead=1))
        writer.commit(chunk(1, dead=1))
    with store.chunk_writer(run, 0, 2, QUICK) as writer:
        assert writer.start() == ChunkStart(chunk=2, rows=22, key=1010, failed=2)
        writer.commit(chunk(2, dead=1))
        totals = writer.finish(make_report(attempt=2, rows=10, failed=1))
    assert totals is not None
    assert (totals.chunks, totals.rows_in, totals.rows_out, totals.rows_failed) == (3, 33, 30, 3)
    assert (totals.rows_inserted, totals.rows_truncated) == (30, 1)
    (shard, _) = store.ledger.shards(run.run_id)
    assert (shard.status, shard.rows_in, shard.rows_out, shard.rows_failed, shard.rows_inserted) == (
        "done",
        33,
        30,
        3,
        30,
    )
    assert (shard.engine["chunks"], shard.engine["rows_truncated"]) == (3, 1)
    write_shard(store, run, 1, make_rows(range(100, 110)))
    assert store.ledger.finish_run(run.run_id, "completed") == RunCounts(43, 40, 3, 2, 2, 0)


def test_nothing_more_is_written_to_a_done_shard(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    with store.chunk_writer(run, 0, 1, QUICK) as writer:
        writer.commit(chunk(0))
        assert writer.finish(make_report()) is not None
    with store.chunk_writer(run, 0, 2, QUICK) as late:
        assert late.commit(chunk(1)).status == "shard_done"
        assert late.finish(make_report(attempt=2)) is None
    assert store.count_results() == 10
    assert len(read_marks(store.ledger, run.run_id)) == 1


def test_a_failed_shards_committed_chunks_count_in_the_run(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    with store.chunk_writer(run, 0, 1, QUICK) as writer:
        writer.commit(chunk(0, dead=2))
        writer.commit(chunk(1))
    store.ledger.mark_shard_failed(run.run_id, 0, "TransientError: the worker died")
    write_shard(store, run, 1, make_rows(range(100, 110)))
    # The failed shard's two chunks are in the results table: the run counts them.
    assert store.ledger.finish_run(run.run_id, "failed") == RunCounts(32, 30, 2, 2, 1, 1)


def test_racing_writers_merge_each_chunk_once(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    barrier = threading.Barrier(2)

    def attempt(n: int) -> list[str]:
        with store.chunk_writer(run, 0, n, QUICK) as writer:
            barrier.wait()
            statuses = [writer.commit(chunk(i, salt=f"w{n}")).status for i in range(5)]
            return [*statuses, "finished" if writer.finish(make_report(n, 50)) else "skipped"]

    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(attempt, [1, 2]))
    merged = [[o[i] for o in outcomes].count("merged") for i in range(5)]
    assert merged == [1] * 5
    assert sorted(o[-1] for o in outcomes) == ["finished", "skipped"]
    assert store.count_results() == 50
    marks = read_marks(store.ledger, run.run_id)
    assert [m.chunk for m in marks] == list(range(5))
    by_chunk = {m.chunk: m.attempt for m in marks}
    for row in store.read_results():
        assert row["input_fingerprint"].endswith(f"w{by_chunk[row['source_key'] // 10]}")
    (shard, _) = store.ledger.shards(run.run_id)
    assert (shard.rows_in, shard.rows_inserted) == (50, 50)


def test_a_locked_database_costs_a_retry_of_the_chunk_step_not_the_chunk(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    run = started_run(sqlite_url)
    quick = impatient_store(sqlite_url, 50)
    caplog.set_level(logging.WARNING, logger="shardwise.results.db_retry")
    retry = DbRetry(tries=8, backoff_s=0.1, max_backoff_s=0.2)
    with (
        quick,
        write_lock_held(sqlite_url, release_after_s=0.4),
        quick.chunk_writer(run, 0, 1, retry) as writer,
    ):
        assert writer.commit(chunk(0)).status == "merged"
    tries = [r.getMessage() for r in caplog.records]
    assert tries and "commit chunk 0 of shard 0 failed on try 1 of 8" in tries[0]
    assert "database is locked" in tries[0] and "on a new connection" in tries[0]
    with make_store(sqlite_url) as store:
        assert store.count_results() == 10


def test_the_retry_gives_up_after_its_tries_with_a_transient_error(sqlite_url: str) -> None:
    run = started_run(sqlite_url)
    from shardwise.errors import TransientError

    retry, gives_up = DbRetry(tries=3, backoff_s=0.01), "failed on all 3 tries, each on a new connection"
    with (
        locked_out(sqlite_url, 20) as quick,
        quick.chunk_writer(run, 0, 1, retry) as writer,
        pytest.raises(TransientError, match=gives_up),
    ):
        writer.commit(chunk(0))
