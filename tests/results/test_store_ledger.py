"""The run ledger: resume, shard states, dead letters, run counts and seen Parquet objects."""

from __future__ import annotations

import dataclasses

import pytest
from results_helpers import TABLE, attempt_writer, make_plan, make_rows, make_run, whole_chunk, write_shard

from shardwise.errors import ConfigError
from shardwise.records import DeadLetter
from shardwise.results import ResultStore


def test_unknown_runs_load_as_none(store: ResultStore) -> None:
    assert store.ledger.load_run("nope") is None
    assert store.ledger.load_plan("nope") is None
    assert store.ledger.run_summary("nope") is None
    assert store.ledger.done_shards("nope") == set()


def test_start_run_stores_the_run_and_plan(store: ResultStore) -> None:
    run, plan = make_run(started_by="event:evt-42"), make_plan(3)
    assert store.ledger.start_run(run, plan) == (run, plan)
    assert store.ledger.load_run(run.run_id) == run
    assert store.ledger.load_plan(run.run_id) == plan
    summary = store.ledger.run_summary(run.run_id)
    assert summary is not None
    assert (summary.status, summary.triggered_by, summary.counts.shards_total) == ("running", "evt-42", 3)


def test_a_resumed_run_keeps_its_plan_and_done_shards(store: ResultStore) -> None:
    run, plan = make_run(), make_plan(3)
    store.ledger.start_run(run, plan)
    write_shard(store, run, 1, make_rows(range(10, 20)))
    store.ledger.mark_shard_failed(run.run_id, 2, "TransientError: connection dropped")
    store.ledger.finish_run(run.run_id, "failed")
    replanned = make_plan(5, rows=4)
    other = dataclasses.replace(run, source_snapshot="snap-now", parameters={"new": True})
    assert store.ledger.start_run(other, replanned) == (run, plan), (
        "a resumed run executes its stored plan, with its stored record"
    )
    assert store.ledger.load_plan(run.run_id) == plan
    assert store.ledger.done_shards(run.run_id) == {1}
    summary = store.ledger.run_summary(run.run_id)
    assert summary is not None and summary.status == "running" and summary.finished_at is None
    assert not write_shard(store, run, 1, make_rows(range(10, 20)), attempt=2)
    assert write_shard(store, run, 2, make_rows(range(20, 30)), attempt=2)


def test_a_run_cannot_resume_with_another_model(store: ResultStore) -> None:
    store.ledger.start_run(make_run(model_version="mv-1"), make_plan())
    with pytest.raises(ConfigError, match="cannot resume"):
        store.ledger.start_run(make_run(model_version="mv-2"), make_plan())


def test_a_run_for_another_table_is_refused(store: ResultStore) -> None:
    with pytest.raises(ConfigError, match="open the sink of the run"):
        store.chunk_writer(make_run(table="other"), 0, 1)


def test_dead_letters_are_stored_once_with_their_lineage(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    dead = [DeadLetter(4, "InputError", "text is empty", "fp-x"), DeadLetter(None, "InputError", "no key")]
    with pytest.raises(RuntimeError), attempt_writer(store, run, 0, 1) as writer:
        whole_chunk([], dead, writer.start())  # held in memory, never committed
        raise RuntimeError("attempt 1 dies")
    assert store.ledger.dead_letters(run.run_id) == []
    assert write_shard(store, run, 0, make_rows(range(3)), attempt=2, dead=dead).dead_letters == 2
    assert not write_shard(store, run, 0, make_rows(range(3)), attempt=3, dead=dead)
    stored = store.ledger.dead_letters(run.run_id)
    assert [(d.source_key, d.error_class, d.message, d.input_fingerprint) for d in stored] == [
        ("4", "InputError", "text is empty", "fp-x"),
        (None, "InputError", "no key", None),
    ]
    assert {(d.run_id, d.shard_id, d.attempt, d.results_table) for d in stored} == {(run.run_id, 0, 2, TABLE)}
    assert all(d.created_at is not None for d in stored)


def test_attempts_failures_and_finish_counts(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan(3))
    assert store.ledger.record_attempt(run.run_id, 0, host="h", device="cpu") == 1
    assert store.ledger.record_attempt(run.run_id, 1) == 1
    assert store.ledger.record_attempt(run.run_id, 1) == 2, "the ledger numbers attempts"
    assert write_shard(store, run, 0, make_rows(range(10)), dead=[DeadLetter(11, "InputError", "x")])
    assert store.ledger.record_attempt(run.run_id, 0) is None, "a done shard needs no new attempt"
    assert not store.ledger.mark_shard_failed(run.run_id, 0, "late"), "a done shard stays done"
    assert store.ledger.mark_shard_failed(run.run_id, 1, "OOM " * 5000)
    counts = store.ledger.finish_run(run.run_id, "failed")
    assert (counts.rows_in, counts.rows_out, counts.rows_failed) == (11, 10, 1)
    assert (counts.shards_total, counts.shards_done, counts.shards_failed) == (3, 1, 1)
    summary = store.ledger.run_summary(run.run_id)
    assert summary is not None and summary.status == "failed" and summary.finished_at is not None
    with pytest.raises(ConfigError, match="'completed' or 'failed'"):
        store.ledger.finish_run(run.run_id, "running")
    with pytest.raises(ConfigError, match="start_run must come before"):
        store.ledger.finish_run("ghost", "completed")


def test_seen_objects_accumulate_per_source_and_destination(store: ResultStore) -> None:
    run, other = make_run(), make_run("run-2", table="delta:/lake/other")
    store.ledger.start_run(run, make_plan())
    store.ledger.start_run(other, make_plan())
    assert store.ledger.seen_objects("s3://bucket/docs/", TABLE) == frozenset()
    store.ledger.record_objects(run.run_id, "s3://bucket/docs/", [("a.parquet", "e1"), ("b.parquet", "e2")])
    store.ledger.record_objects(run.run_id, "s3://bucket/docs/", [("a.parquet", "e1"), ("a.parquet", "e3")])
    store.ledger.record_objects(run.run_id, "s3://other/", [("z.parquet", "e9")])
    assert store.ledger.seen_objects("s3://bucket/docs/", TABLE) == {
        ("a.parquet", "e1"),
        ("b.parquet", "e2"),
        ("a.parquet", "e3"),
    }
    # Another destination of the same source has seen none of them, until a run into it scores them.
    assert store.ledger.seen_objects("s3://bucket/docs/", "delta:/lake/other") == frozenset()
    store.ledger.record_objects(other.run_id, "s3://bucket/docs/", [("a.parquet", "e1")])
    assert store.ledger.seen_objects("s3://bucket/docs/", "delta:/lake/other") == {("a.parquet", "e1")}
    # A watcher, which does not know its runs' destination, counts what every destination scored.
    assert store.ledger.seen_objects("s3://bucket/docs/", None) == {("a.parquet", "e1")}
    assert store.ledger.seen_objects("s3://other/", None) == {("z.parquet", "e9")}
    with pytest.raises(ConfigError, match="start_run must come before record_objects"):
        store.ledger.record_objects("ghost", "s3://bucket/docs/", [("a.parquet", "e1")])
