"""Exactly-once merge: retries, repeated runs, changed inputs and new model versions."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np
import pytest
import sqlalchemy as sa
from results_helpers import attempt_writer, make_plan, make_rows, make_run, snapshot, whole_chunk, write_shard

from shardwise.errors import ConfigError
from shardwise.records import DeadLetter, ResultRow
from shardwise.results import Chunk, ResultStore


def test_commit_merges_rows_and_marks_the_shard_done(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    outcome = write_shard(store, run, 0, make_rows(range(10)))
    assert outcome and (outcome.inserted, outcome.updated, outcome.unchanged) == (10, 0, 0)
    assert store.count_results() == 10
    assert store.ledger.done_shards(run.run_id) == {0}
    row = store.read_results()[3]
    assert (row["source_key"], row["run_id"], row["shard_id"], row["truncated"]) == (3, run.run_id, 0, True)
    assert (row["model_name"], row["model_version"], row["code_version"]) == ("tiny", "mv-1", "code-1")
    assert (row["input_fingerprint"], row["input_snapshot"]) == ("fp-3", "snap-1")
    assert (row["score"], row["label_id"], row["label"]) == (0.5, 7, "label 3")
    assert row["scored_at"].tzinfo is not None


def test_recommitting_a_done_shard_changes_nothing(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    write_shard(store, run, 0, make_rows(range(10)), dead=[DeadLetter(99, "InputError", "empty text")])
    before = snapshot(store)
    again = write_shard(store, run, 0, make_rows(range(10), fp_salt="changed"), attempt=2)
    assert not again and again.committed is False
    assert snapshot(store) == before
    assert len(store.ledger.dead_letters(run.run_id)) == 1


def test_a_repeated_run_on_the_same_inputs_adds_and_changes_nothing(store: ResultStore) -> None:
    first, second = make_run("run-1"), make_run("run-2")
    store.ledger.start_run(first, make_plan())
    write_shard(store, first, 0, make_rows(range(10)))
    before = snapshot(store)
    store.ledger.start_run(second, make_plan())
    outcome = write_shard(store, second, 0, make_rows(range(10)))
    assert outcome and (outcome.inserted, outcome.updated, outcome.unchanged) == (0, 0, 10)
    assert snapshot(store) == before, "unchanged inputs keep their original run_id and scored_at"
    assert store.ledger.done_shards(second.run_id) == {0}


def test_a_changed_input_replaces_the_row(store: ResultStore) -> None:
    first, second = make_run("run-1"), make_run("run-2")
    store.ledger.start_run(first, make_plan())
    write_shard(store, first, 0, make_rows(range(10)))
    store.ledger.start_run(second, make_plan())
    changed = make_rows([2, 5], fp_salt="v2") + make_rows([0, 1, 3, 4, 6, 7, 8, 9])
    outcome = write_shard(store, second, 0, changed)
    assert (outcome.inserted, outcome.updated, outcome.unchanged) == (0, 2, 8)
    rows = {r["source_key"]: r for r in store.read_results()}
    assert store.count_results() == 10
    assert rows[2]["run_id"] == "run-2" and rows[2]["input_fingerprint"] == "fp-2v2"
    assert np.array_equal(rows[2]["embedding"], changed[0].values["embedding"])
    assert rows[0]["run_id"] == "run-1"


def test_a_new_model_version_adds_rows_beside_the_old(store: ResultStore) -> None:
    old, new = make_run("run-1", "mv-1"), make_run("run-2", "mv-2")
    store.ledger.start_run(old, make_plan())
    write_shard(store, old, 0, make_rows(range(10)))
    store.ledger.start_run(new, make_plan())
    outcome = write_shard(store, new, 0, make_rows(range(10)))
    assert outcome.inserted == 10
    assert store.count_results() == 20
    assert store.count_results("mv-1") == store.count_results("mv-2") == 10


def test_an_exception_before_commit_leaves_nothing(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    with pytest.raises(RuntimeError, match="model crashed"), attempt_writer(store, run, 0, 1) as writer:
        assert writer.start().rows == 0
        whole_chunk(make_rows(range(10)), [DeadLetter(1, "InputError", "bad")])  # scored, not committed
        raise RuntimeError("model crashed")
    assert store.count_results() == 0
    assert store.ledger.dead_letters(run.run_id) == []
    assert store.ledger.done_shards(run.run_id) == set()


class _FailsAt(Sequence[ResultRow]):
    """A batch whose reading fails part-way, as a source that drops mid-shard would."""

    def __init__(self, rows: list[ResultRow], at: int) -> None:
        self.rows, self.at = rows, at

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> ResultRow: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[ResultRow]: ...
    def __getitem__(self, i: int | slice) -> ResultRow | Sequence[ResultRow]:
        return self.rows[i]

    def __iter__(self) -> Iterator[ResultRow]:
        for i, row in enumerate(self.rows):
            if i == self.at:
                raise ConnectionError("source went away")
            yield row


def test_a_writer_failing_halfway_then_retried_ends_with_one_copy(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    rows = make_rows(range(10))
    with pytest.raises(ConnectionError), attempt_writer(store, run, 0, 1) as writer:
        failing = Chunk(0, _FailsAt(rows, at=7), [], 0, {"rows": 10, "key": 9})
        writer.commit(failing)  # staging reads the rows: the source drops at the 8th
    assert store.count_results() == 0
    assert store.ledger.done_shards(run.run_id) == set()
    assert write_shard(store, run, 0, rows, attempt=2)
    assert store.count_results() == 10
    assert sorted(r["source_key"] for r in store.read_results()) == list(range(10))


def test_a_key_staged_twice_keeps_its_last_value(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    rows = make_rows(range(5)) + make_rows([2], fp_salt="later")
    outcome = write_shard(store, run, 0, rows)
    assert (outcome.inserted, outcome.updated, outcome.unchanged) == (5, 0, 0)
    assert {r["source_key"]: r["input_fingerprint"] for r in store.read_results()}[2] == "fp-2later"


def test_rows_that_do_not_match_the_outputs_are_refused(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    good = make_rows([1])[0]
    short = ResultRow(1, {**good.values, "embedding": np.zeros(3, np.float32)}, "fp")
    missing = ResultRow(1, {"embedding": good.values["embedding"]}, "fp")
    text_key = ResultRow("one", good.values, "fp")
    for bad, match in [(short, "1-d vectors of 8"), (missing, "expects exactly"), (text_key, "int keys")]:
        with pytest.raises(ConfigError, match=match), attempt_writer(store, run, 0, 1) as writer:
            writer.commit(whole_chunk([bad]))
    assert store.count_results() == 0


def test_committing_a_shard_outside_the_plan_is_refused(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan(shards=2))
    with pytest.raises(ConfigError, match="not in run"):
        write_shard(store, run, 7, make_rows([1]))


def _temp_tables(conn: sa.Connection) -> set[str]:
    if conn.dialect.name == "postgresql":  # pg_class lists every session's temp tables
        rows = conn.execute(
            sa.text("SELECT relname FROM pg_class WHERE relpersistence = 't' AND relkind = 'r'")
        )
    else:  # SQLite's temp tables are visible to their own connection only
        rows = conn.execute(sa.text("SELECT name FROM sqlite_temp_master WHERE type = 'table'"))
    return {str(r[0]) for r in rows}


def test_the_staging_table_is_gone_after_each_commit(store: ResultStore) -> None:
    run = make_run()
    store.ledger.start_run(run, make_plan())
    with attempt_writer(store, run, 0, 1) as writer:
        assert writer.commit(whole_chunk(make_rows(range(3)))).status == "merged"
    engine = store.sink.engine  # type: ignore[attr-defined]
    pooled = [engine.connect() for _ in range(engine.pool.checkedin())]
    try:
        assert pooled and all(_temp_tables(conn) == set() for conn in pooled)
    finally:
        for conn in pooled:
            conn.close()
    assert write_shard(store, run, 0, make_rows(range(3)))
