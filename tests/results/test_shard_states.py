"""The shard state machine: every legal move, every illegal one, the history it keeps, and an older
ledger opened by this release; each on SQLite and on real PostgreSQL (see conftest.py)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import sqlalchemy as sa
from results_helpers import (
    make_plan,
    make_report,
    make_rows,
    make_run,
    whole_chunk,
    write_shard,
)

from shardwise.errors import ShardStateError
from shardwise.results import SHARD_STATUSES, Ledger, ResultStore, ledger_sql
from shardwise.results.codec import bind_timestamp, utc_now
from shardwise.results.shard_states import TRANSITIONS, check_transition
from shardwise.results.sqlfiles import load_script, statement


def _status(ledger: Ledger, run_id: str, shard_id: int) -> tuple[str, int, str | None]:
    shard = next(s for s in ledger.shards(run_id) if s.shard_id == shard_id)
    return shard.status, shard.attempts, shard.last_error


def _moves(ledger: Ledger, run_id: str, shard_id: int) -> list[tuple[str, str, int]]:
    return [(t.from_status, t.to_status, t.attempt) for t in ledger.shard_transitions(run_id, shard_id)]


def test_every_pair_of_statuses_is_legal_exactly_as_the_table_says() -> None:
    for current, target in itertools.product(SHARD_STATUSES, repeat=2):
        if target in TRANSITIONS[current]:
            check_transition("r", 0, current, target)
        else:
            with pytest.raises(ShardStateError, match=f"cannot go from {current} to {target}"):
                check_transition("r", 0, current, target)
    assert TRANSITIONS["done"] == frozenset(), "done is final"
    assert TRANSITIONS["failed"] == {"pending"}, "only a resume moves a failed shard"


def test_an_attempt_runs_fails_is_retried_runs_again_and_is_done(store: ResultStore) -> None:
    ledger, run = store.ledger, make_run()
    ledger.start_run(run, make_plan(2))
    assert _status(ledger, run.run_id, 0) == ("pending", 0, None)
    assert ledger.record_attempt(run.run_id, 0, host="h", owner="h:1/0", lease_s=30) == 1
    assert _status(ledger, run.run_id, 0) == ("running", 1, None)
    assert ledger.mark_shard_retrying(run.run_id, 0, "TransientError: connection reset", "h:1/0")
    assert _status(ledger, run.run_id, 0) == ("retrying", 1, "TransientError: connection reset")
    assert ledger.record_attempt(run.run_id, 0, owner="h:1/0") == 2
    assert ledger.record_attempt(run.run_id, 0, owner="g:2/0") == 3  # a newer attempt takes over
    with store.chunk_writer(run, 0, 3) as writer:  # the attempt that is running finishes it
        writer.commit(whole_chunk(make_rows(range(10)), [], writer.start()))
        assert writer.finish(make_report(3, 10)) is not None
    assert _status(ledger, run.run_id, 0)[:2] == ("done", 3)
    assert _moves(ledger, run.run_id, 0) == [
        ("pending", "running", 1),
        ("running", "retrying", 1),
        ("retrying", "running", 2),
        ("running", "running", 3),
        ("running", "done", 3),
    ]
    history = ledger.shard_transitions(run.run_id, 0)
    assert [t.worker for t in history[:3]] == ["h:1/0", "h:1/0", "h:1/0"]
    assert history[1].error == "TransientError: connection reset" and history[0].error is None
    times = [t.at for t in history]
    assert all(times) and times == sorted(times)  # type: ignore[type-var]
    assert ledger.shard_transitions(run.run_id, 1) == []


def test_a_done_shard_stays_done_whatever_is_reported_late(store: ResultStore) -> None:
    ledger, run = store.ledger, make_run()
    ledger.start_run(run, make_plan(1))
    assert write_shard(store, run, 0, make_rows(range(5)))
    before = _moves(ledger, run.run_id, 0)
    assert ledger.record_attempt(run.run_id, 0) is None
    assert not ledger.mark_shard_failed(run.run_id, 0, "late")
    assert not ledger.mark_shard_retrying(run.run_id, 0, "late")
    assert _status(ledger, run.run_id, 0)[0] == "done" and _moves(ledger, run.run_id, 0) == before


@pytest.mark.parametrize("path", ["pending", "running", "retrying"])
def test_a_shard_fails_from_any_unfinished_status_and_once(store: ResultStore, path: str) -> None:
    ledger, run = store.ledger, make_run()
    ledger.start_run(run, make_plan(1))
    if path != "pending":
        ledger.record_attempt(run.run_id, 0)
    if path == "retrying":
        ledger.mark_shard_retrying(run.run_id, 0, "first")
    assert ledger.mark_shard_failed(run.run_id, 0, "RetryDeadlineError: past the deadline")
    assert not ledger.mark_shard_failed(run.run_id, 0, "reported again by the flow")
    assert _status(ledger, run.run_id, 0)[0::2] == ("failed", "RetryDeadlineError: past the deadline")
    assert _moves(ledger, run.run_id, 0)[-1][:2] == (path, "failed")
    assert sum(move[1] == "failed" for move in _moves(ledger, run.run_id, 0)) == 1


def test_a_failure_reported_by_a_worker_whose_attempt_was_taken_over_changes_nothing(
    store: ResultStore,
) -> None:
    ledger, run = store.ledger, make_run()
    ledger.start_run(run, make_plan(1))
    ledger.record_attempt(run.run_id, 0, owner="a:1/0")
    ledger.record_attempt(run.run_id, 0, owner="b:2/0")  # b took the shard over; a is a zombie
    assert not ledger.mark_shard_retrying(run.run_id, 0, "a's connection dropped", "a:1/0")
    assert not ledger.mark_shard_failed(run.run_id, 0, "a gave up", "a:1/0")
    assert _status(ledger, run.run_id, 0) == ("running", 2, None)
    assert ledger.mark_shard_retrying(run.run_id, 0, "b's connection dropped", "b:2/0")
    assert _moves(ledger, run.run_id, 0)[-1] == ("running", "retrying", 2)


def test_a_try_that_failed_before_its_attempt_was_counted_is_retrying_from_pending(
    store: ResultStore,
) -> None:
    ledger, run = store.ledger, make_run()
    ledger.start_run(run, make_plan(1))
    assert ledger.mark_shard_retrying(run.run_id, 0, "the database was down")
    assert ledger.mark_shard_retrying(run.run_id, 0, "still down")
    assert _status(ledger, run.run_id, 0) == ("retrying", 0, "still down")
    assert ledger.record_attempt(run.run_id, 0) == 1
    assert _moves(ledger, run.run_id, 0) == [
        ("pending", "retrying", 0),
        ("retrying", "retrying", 0),
        ("retrying", "running", 1),
    ]


def test_only_a_resume_scores_a_failed_shard_again(store: ResultStore) -> None:
    ledger, run = store.ledger, make_run()
    ledger.start_run(run, make_plan(2))
    ledger.record_attempt(run.run_id, 0)
    ledger.mark_shard_failed(run.run_id, 0, "boom")
    with pytest.raises(ShardStateError, match=r"cannot go from failed to running: .*--resume"):
        ledger.record_attempt(run.run_id, 0)
    with pytest.raises(ShardStateError, match="cannot go from failed to retrying"):
        ledger.mark_shard_retrying(run.run_id, 0, "again")
    assert _status(ledger, run.run_id, 0)[:2] == ("failed", 1), "a refused move changes nothing"
    ledger.start_run(run, make_plan(2))  # the resume
    assert _status(ledger, run.run_id, 0)[0] == "pending" and _status(ledger, run.run_id, 1)[0] == "pending"
    assert _moves(ledger, run.run_id, 0)[-1] == ("failed", "pending", 1)
    assert _moves(ledger, run.run_id, 1) == [], "only failed shards move on a resume"
    assert ledger.record_attempt(run.run_id, 0) == 2


@pytest.mark.parametrize("path", ["pending", "retrying", "failed"])
def test_a_done_mark_needs_a_running_attempt(store: ResultStore, path: str) -> None:
    ledger, run = store.ledger, make_run()
    ledger.start_run(run, make_plan(1))
    if path != "pending":
        ledger.record_attempt(run.run_id, 0)
        getattr(ledger, f"mark_shard_{path}")(run.run_id, 0, "boom")
    with store.chunk_writer(run, 0, 1) as writer:
        assert writer.commit(whole_chunk(make_rows(range(3)), [], writer.start())).status == "merged"
        with pytest.raises(ShardStateError, match=f"cannot go from {path} to done: .*record the attempt"):
            writer.finish(make_report(1, 3))
    assert _status(ledger, run.run_id, 0)[0] == path


def test_runs_and_the_tally_show_the_states(store: ResultStore) -> None:
    ledger, run = store.ledger, make_run()
    ledger.start_run(run, make_plan(4))
    assert write_shard(store, run, 0, make_rows(range(3)))
    ledger.record_attempt(run.run_id, 1)
    ledger.mark_shard_retrying(run.run_id, 1, "reset")
    ledger.record_attempt(run.run_id, 2)
    ledger.mark_shard_failed(run.run_id, 2, "boom")
    (listed,) = ledger.recent_runs()
    assert listed.shard_states == {"done": 1, "retrying": 1, "failed": 1, "pending": 1}
    assert ledger.shard_tally(run.run_id) == {
        "done": 1,
        "retrying": 1,
        "failed": 1,
        "pending": 1,
        "retried": 1,
    }


def _ledger_before_states(url: str) -> None:
    """The ledger as the release before shard states made it: statuses pending, done and failed only,
    and no transitions table; with a run that has a done, a failed (with a chunk mark) and a pending
    shard."""
    new_check = "CHECK (status IN ('pending', 'running', 'retrying', 'done', 'failed'))"
    run, engine = make_run(), sa.create_engine(url)
    with engine.begin() as conn:
        for stmt in load_script(conn.dialect.name, "ledger_schema"):
            conn.exec_driver_sql(stmt.replace(new_check, "CHECK (status IN ('pending', 'done', 'failed'))"))
        for stmt in load_script(conn.dialect.name, "chunks_schema"):
            conn.exec_driver_sql(stmt)
        now = utc_now()
        ledger_sql.start_run(conn, run, make_plan(3), now)  # no failed shard yet: no transition written
        for shard_id, status in ((0, "done"), (1, "failed")):
            conn.execute(
                sa.text("UPDATE shardwise_shards SET status = :s, attempts = 1 WHERE shard_id = :i"),
                {"s": status, "i": shard_id},
            )
        conn.execute(
            sa.text(
                "INSERT INTO shardwise_chunks (run_id, shard_id, chunk, attempt, rows_in, rows_out, "
                "rows_failed, rows_truncated, rows_inserted, rows_updated, rows_unchanged, position, "
                "committed_at) VALUES (:r, 1, 0, 1, 10, 10, 0, 0, 10, 0, 0, :p, :t)"
            ),
            {"r": run.run_id, "p": '{"rows": 10, "key": 9}', "t": bind_timestamp(conn, now)},
        )
    engine.dispose()


def _check_text(ledger: Ledger) -> Any:
    with ledger.reading("read the shards' CHECK") as conn:
        return conn.execute(statement(conn, "shards_status_check")).scalar()


def test_an_older_ledger_opens_keeps_its_shards_and_gains_the_new_states(db_url: str) -> None:
    _ledger_before_states(db_url)
    run = make_run()
    with Ledger(db_url) as ledger:
        assert "retrying" not in str(_check_text(ledger))
        ledger.ensure()
        ledger.ensure()  # idempotent
        assert "retrying" in str(_check_text(ledger))
        assert [(s.shard_id, s.status, s.attempts) for s in ledger.shards(run.run_id)] == [
            (0, "done", 1),
            (1, "failed", 1),
            (2, "pending", 0),
        ]
        with ledger.reading("inspect") as conn:
            assert not sa.inspect(conn).has_table("shardwise_shards_before_states")
            (marks,) = conn.execute(sa.text("SELECT count(*) FROM shardwise_chunks")).one()
            assert marks == 1
            if conn.dialect.name == "sqlite":  # the chunks' foreign key still names the shards table
                ddl = conn.execute(sa.text("SELECT sql FROM sqlite_master WHERE name = 'shardwise_chunks'"))
                assert "REFERENCES shardwise_shards (" in ddl.scalar_one()
        assert ledger.record_attempt(run.run_id, 2) == 1
        assert ledger.mark_shard_retrying(run.run_id, 2, "reset")
        ledger.start_run(run, make_plan(3))  # a resume of the older release's failed run
        assert ledger.record_attempt(run.run_id, 1) == 2
        assert _moves(ledger, run.run_id, 1) == [("failed", "pending", 1), ("pending", "running", 2)]
        assert ledger.recent_runs()[0].shard_states == {"done": 1, "running": 1, "retrying": 1}
