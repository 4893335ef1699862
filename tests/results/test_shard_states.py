"""The shard state machine: every legal move, every illegal one, and the history it keeps; each on
SQLite and on real PostgreSQL (see conftest.py)."""

from __future__ import annotations

import itertools

import pytest
from results_helpers import (
    make_plan,
    make_report,
    make_rows,
    make_run,
    whole_chunk,
    write_shard,
)

from shardwise.errors import ShardStateError
from shardwise.results import SHARD_STATUSES, Ledger, ResultStore
from shardwise.results.shard_states import TRANSITIONS, check_transition


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
