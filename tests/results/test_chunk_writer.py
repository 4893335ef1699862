"""Chunk by chunk: each chunk merged exactly once with its mark, the done-mark summing every chunk."""

from __future__ import annotations

from dataclasses import replace

from results_helpers import (
    OUTPUTS,
    attempt_writer,
    brief,
    make_plan,
    make_report,
    make_rows,
    make_run,
    make_store,
    nth_chunk,
    write_shard,
)

from shardwise.cost import RunUsage
from shardwise.results import ChunkCommit, ChunkStart, ResultStore, RunCounts, read_marks


def test_a_chunk_commits_once_and_a_second_writer_of_it_changes_nothing(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    with (
        attempt_writer(store, run, 0, 1, brief()) as first,
        attempt_writer(store, run, 0, 2, brief()) as second,
    ):
        assert first.commit(nth_chunk(0, dead=1)).status == "merged"
        again = second.commit(nth_chunk(0, salt="second", dead=1))
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
    with attempt_writer(store, run, 0, 1, brief()) as writer:
        assert writer.start() == ChunkStart()
        writer.commit(nth_chunk(0, dead=1))
        writer.commit(nth_chunk(1, dead=1))
    with attempt_writer(store, run, 0, 2, brief()) as writer:
        assert writer.start() == ChunkStart(chunk=2, rows=22, key=1010, failed=2)
        writer.commit(nth_chunk(2, dead=1))
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
    assert store.ledger.finish_run(run.run_id, "completed") == RunCounts(
        43, 40, 3, 2, 2, 0, usage=RunUsage(rows=43)
    )


def test_nothing_more_is_written_to_a_done_shard(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    with attempt_writer(store, run, 0, 1, brief()) as writer:
        writer.commit(nth_chunk(0))
        assert writer.finish(make_report()) is not None
    with attempt_writer(store, run, 0, 2, brief()) as late:
        assert late.commit(nth_chunk(1)).status == "shard_done"
        assert late.finish(make_report(attempt=2)) is None
    assert store.count_results() == 10
    assert len(read_marks(store.ledger, run.run_id)) == 1


def test_a_failed_shards_committed_chunks_count_in_the_run(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    with attempt_writer(store, run, 0, 1, brief()) as writer:
        writer.commit(nth_chunk(0, dead=2))
        writer.commit(nth_chunk(1))
    store.ledger.mark_shard_failed(run.run_id, 0, "TransientError: the worker died")
    write_shard(store, run, 1, make_rows(range(100, 110)))
    # The failed shard's two chunks are in the results table: the run counts them.
    assert store.ledger.finish_run(run.run_id, "failed") == RunCounts(
        32, 30, 2, 2, 1, 1, usage=RunUsage(rows=32)
    )


def test_chunk_marks_sum_the_count_outputs_so_shard_and_run_totals_survive_retries(db_url: str) -> None:
    """``label_id`` (7 in every row) declared a count, as a generator's tokens: each chunk mark holds its
    rows' sum, a later attempt starts from the committed sums, and the done-mark and the run add them up."""
    counted = tuple(replace(o, count=True) if o.name == "label_id" else o for o in OUTPUTS)
    with make_store(db_url, outputs=counted) as store:
        store.ensure_schema()
        run = make_run()
        store.ledger.start_run(run, make_plan())
        with attempt_writer(store, run, 0, 1, brief()) as writer:
            writer.commit(nth_chunk(0, dead=1))  # dead letters have no outputs: they count nothing
        with attempt_writer(store, run, 0, 2, brief()) as writer:
            assert writer.start().counts == {"label_id": 70}
            writer.commit(nth_chunk(1))
            totals = writer.finish(make_report(attempt=2))
        assert totals is not None and totals.counts == {"label_id": 140}
        assert [m.counts for m in read_marks(store.ledger, run.run_id)] == [{"label_id": 70}] * 2
        (shard, _) = store.ledger.shards(run.run_id)
        assert shard.engine["counts"] == {"label_id": 140}
        assert store.ledger.shard_progress(run.run_id)[0].progress_counts == {"label_id": 140}
        with attempt_writer(store, run, 1, 1, brief()) as writer:
            writer.commit(nth_chunk(2))
        store.ledger.mark_shard_failed(run.run_id, 1, "TransientError: the worker died")
        counts = store.ledger.finish_run(run.run_id, "failed")
    assert (counts.rows_out, counts.counts) == (30, {"label_id": 210}), "the failed shard's chunk counts too"
