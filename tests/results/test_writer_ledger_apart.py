"""The chunk writer with the ledger in one database and the results in another: the sink's commit is the
commit point, and a chunk whose ledger mark was lost is marked without being written twice."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from results_helpers import (
    OUTPUTS,
    TABLE,
    attempt_writer,
    brief,
    make_plan,
    make_report,
    make_run,
    nth_chunk,
    snapshot,
)

from shardwise.results import Ledger, ResultStore, read_marks
from shardwise.sinks import Layout, SinkChunk
from shardwise.sinks.sql.sink import SqlSink

LAYOUT = Layout(OUTPUTS, "int")


@pytest.fixture
def apart(db_url: str, tmp_path: Path) -> Iterator[ResultStore]:
    """Results in ``db_url`` (SQLite or PostgreSQL), the ledger in an SQLite file of its own."""
    with ResultStore(Ledger(f"sqlite:///{tmp_path / 'ledger.db'}"), SqlSink(db_url, TABLE, LAYOUT)) as store:
        store.ensure_schema()
        yield store


def _as_sink_chunk(run_id: str, number: int, dead: int = 0) -> SinkChunk:
    """Chunk ``number`` (see ``nth_chunk``) as a sink commits it."""
    from datetime import datetime, timezone

    from shardwise.results import Lineage

    chunk = nth_chunk(number, dead=dead)
    lineage = Lineage("tiny", "mv-1", "code-1", "snap-1", run_id, 0, datetime.now(timezone.utc))
    return SinkChunk(run_id, 0, number, chunk.rows, lineage, chunk.position)


def test_a_chunk_the_sink_holds_but_the_ledger_lost_is_marked_not_written_again(apart: ResultStore) -> None:
    run = make_run()
    apart.ledger.start_run(run, make_plan())
    # A killed attempt: its commit landed in the sink, its ledger mark never did.
    first = apart.sink.commit(_as_sink_chunk(run.run_id, 0, dead=1))
    assert (first.status, first.inserted) == ("written", 10)
    before = snapshot(apart)
    assert read_marks(apart.ledger, run.run_id) == []

    with attempt_writer(apart, run, 0, 2, brief()) as writer:
        assert writer.start().chunk == 0  # the ledger does not know the chunk: the attempt starts there
        done = writer.commit(nth_chunk(0, dead=1))
        assert done.status == "merged" and done.counts is not None
        assert (done.counts.inserted, done.counts.updated) == (10, 0)  # as the sink recorded them
        assert writer.commit(nth_chunk(1)).status == "merged"
        assert writer.finish(make_report(2, 20)) is not None
    assert snapshot(apart)[:10] == before  # chunk 0's rows as the first attempt wrote them, once
    marks = read_marks(apart.ledger, run.run_id)
    assert [(m.chunk, m.attempt, m.rows_inserted) for m in marks] == [(0, 2, 10), (1, 2, 10)]
    assert [d.source_key for d in apart.ledger.dead_letters(run.run_id)] == ["1000"]


def test_a_chunk_committed_at_another_position_is_marked_from_the_sinks_record(apart: ResultStore) -> None:
    run = make_run()
    apart.ledger.start_run(run, make_plan())
    apart.sink.commit(_as_sink_chunk(run.run_id, 0))  # ten rows, then an attempt reading more rows
    with attempt_writer(apart, run, 0, 2, brief()) as writer:
        other = writer.commit(nth_chunk(0, dead=2))
        assert other.status == "already" and dict(other.stored_position or {}) == {"rows": 10, "key": 9}
        assert writer.start().chunk == 1  # the retry starts after it, instead of meeting it again
    (mark,) = read_marks(apart.ledger, run.run_id)
    assert (mark.chunk, mark.rows_in, mark.rows_out, mark.rows_failed) == (0, 10, 10, 0)
    assert apart.ledger.dead_letters(run.run_id) == []


def test_racing_writers_commit_and_mark_each_chunk_once(apart: ResultStore) -> None:
    run = make_run()
    apart.ledger.start_run(run, make_plan())
    barrier = threading.Barrier(2)

    def attempt(n: int) -> list[str]:
        with attempt_writer(apart, run, 0, n, brief()) as writer:
            barrier.wait()
            return [writer.commit(nth_chunk(i, dead=1)).status for i in range(4)]

    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(attempt, [1, 2]))
    assert len(apart.read_results()) == 40
    marks = read_marks(apart.ledger, run.run_id)
    assert [m.chunk for m in marks] == [0, 1, 2, 3]
    assert len(apart.ledger.dead_letters(run.run_id)) == 4  # one per chunk, never doubled
    assert all(s in ("merged", "already") for o in outcomes for s in o)


def test_committed_inputs_list_what_the_sink_holds_for_a_model_version(apart: ResultStore) -> None:
    run = make_run()
    apart.ledger.start_run(run, make_plan())
    apart.sink.commit(_as_sink_chunk(run.run_id, 0))
    held = dict(apart.sink.committed_inputs("mv-1"))
    assert held == {str(k): f"fp-{k}" for k in range(10)}
    assert list(apart.sink.committed_inputs("mv-2")) == []
    assert apart.sink.committed(run.run_id, 0, 0) is not None
    assert apart.sink.committed(run.run_id, 0, 1) is None
