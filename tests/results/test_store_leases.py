"""Leases in the ledger: taken, renewed, released, refused, taken over once, and listed with live counts."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa
from results_helpers import make_plan, make_rows, make_run, write_shard

from shardwise.db.codec import decode_timestamp, utc_now
from shardwise.errors import ConfigError, RunTakenOverError
from shardwise.results import Ledger, ResultStore


def _lease(ledger: Ledger, table: str, where: str, params: dict) -> tuple:
    with ledger.reading("read a lease") as conn:
        row = conn.execute(
            sa.text(f"select owner, lease_expires_at from {table} where {where}"), params
        ).one()
    return row[0], decode_timestamp(row[1])


def test_a_run_lease_is_taken_renewed_and_released_when_the_run_finishes(store: ResultStore) -> None:
    ledger, run = store.ledger, make_run()
    before = utc_now()
    ledger.start_run(run, make_plan(2), owner="host-a:1/0", lease_s=60)
    summary = ledger.run_summary(run.run_id)
    assert summary is not None and summary.owner == "host-a:1/0"
    assert summary.lease_expires_at is not None
    assert timedelta(seconds=59) < summary.lease_expires_at - before < timedelta(seconds=62)
    assert summary.state() == "running"
    time.sleep(0.05)
    assert ledger.renew_run_lease(run.run_id, "host-a:1/0", 60)
    renewed = ledger.run_summary(run.run_id)
    assert renewed is not None and renewed.lease_expires_at > summary.lease_expires_at  # type: ignore[operator]
    assert not ledger.renew_run_lease(run.run_id, "host-b:2/0", 60), "only the owner renews"
    ledger.finish_run(run.run_id, "completed", owner="host-a:1/0")
    done = ledger.run_summary(run.run_id)
    assert done is not None and done.lease_expires_at == done.finished_at, "finishing releases the lease"
    assert done.state() == "completed"
    assert not ledger.renew_run_lease(run.run_id, "host-a:1/0", 60), "a finished run is not renewed"


def test_a_live_lease_refuses_a_resume_and_force_takes_it_only_from_the_owner_seen(
    store: ResultStore,
) -> None:
    ledger, run, plan = store.ledger, make_run(), make_plan(2)
    ledger.start_run(run, plan, owner="host-a:1/0")
    assert ledger.start_run(run, plan, owner="host-a:1/0")[0] == run, "its own owner may start it again"
    with pytest.raises(ConfigError, match=r"still running on host-a:1/0: its lease runs until .* --force"):
        ledger.start_run(run, plan, owner="host-b:2/0")
    with pytest.raises(ConfigError, match="taken over meanwhile by host-a:1/0"):
        ledger.start_run(run, plan, owner="host-b:2/0", take_from="host-c:3/0")
    ledger.start_run(run, plan, owner="host-b:2/0", take_from="host-a:1/0")
    summary = ledger.run_summary(run.run_id)
    assert summary is not None and summary.owner == "host-b:2/0"
    assert not ledger.renew_run_lease(run.run_id, "host-a:1/0", 60), "the old owner lost it"
    with pytest.raises(RunTakenOverError, match="was taken over by host-b:2/0"):
        ledger.finish_run(run.run_id, "completed", owner="host-a:1/0")
    ledger.finish_run(run.run_id, "completed", owner="host-b:2/0")


def test_an_expired_lease_shows_abandoned_and_is_taken_without_force(store: ResultStore) -> None:
    ledger, run, plan = store.ledger, make_run(), make_plan(2)
    ledger.start_run(run, plan, owner="host-a:1/0", lease_s=0.05)
    time.sleep(0.1)
    summary = ledger.run_summary(run.run_id)
    assert summary is not None and (summary.status, summary.state()) == ("running", "abandoned")
    (listed,) = ledger.recent_runs()
    assert (listed.state(), listed.owner) == ("abandoned", "host-a:1/0")
    ledger.start_run(run, plan, owner="host-b:2/0")
    resumed = ledger.run_summary(run.run_id)
    assert resumed is not None and (resumed.owner, resumed.state()) == ("host-b:2/0", "running")


@pytest.mark.parametrize("forced", [True, False], ids=["forced", "expired"])
def test_of_two_resumers_at_once_exactly_one_takes_the_run(db_url: str, forced: bool) -> None:
    """Both read the same owner first; the conditional update lets one through, the other is refused."""
    run, plan = make_run(), make_plan(2)
    with Ledger(db_url) as ledger:
        ledger.ensure()
        ledger.start_run(run, plan, owner="dead:1/0", lease_s=60 if forced else 0.05)
    time.sleep(0.1)
    barrier, outcomes = threading.Barrier(2), {}

    def resume(owner: str) -> None:
        with Ledger(db_url) as mine:
            barrier.wait()
            try:
                mine.start_run(run, plan, owner=owner, take_from="dead:1/0" if forced else None)
                outcomes[owner] = "took it"
            except ConfigError as exc:
                outcomes[owner] = str(exc)

    threads = [threading.Thread(target=resume, args=(f"resumer-{i}:1/0",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(o == "took it" for o in outcomes.values()) == [False, True], outcomes
    (winner,) = [o for o, result in outcomes.items() if result == "took it"]
    (refusal,) = [result for result in outcomes.values() if result != "took it"]
    assert winner in refusal, "the refusal names the winner"
    with Ledger(db_url) as ledger:
        summary = ledger.run_summary(run.run_id)
    assert summary is not None and summary.owner == winner


def test_shard_attempts_take_and_renew_their_own_lease(store: ResultStore) -> None:
    ledger, run = store.ledger, make_run()
    ledger.start_run(run, make_plan(2), owner="flow:1/0")
    where, key = "run_id = :r and shard_id = 0", {"r": run.run_id}
    assert ledger.record_attempt(run.run_id, 0, host="h", owner="h:7/1", lease_s=30) == 1
    owner, first = _lease(ledger, "shardwise_shards", where, key)
    assert owner == "h:7/1" and first is not None
    time.sleep(0.05)
    assert ledger.renew_shard_lease(run.run_id, 0, 1, "h:7/1", 30)
    assert _lease(ledger, "shardwise_shards", where, key)[1] > first
    assert ledger.record_attempt(run.run_id, 0, host="g", owner="g:8/0", lease_s=30) == 2
    assert not ledger.renew_shard_lease(run.run_id, 0, 1, "h:7/1", 30), "a newer attempt took the shard"
    (listed,) = ledger.recent_runs()
    assert listed.shards_running == 1


def test_a_running_runs_counts_are_summed_from_its_shards_now(store: ResultStore) -> None:
    ledger, run = store.ledger, make_run()
    ledger.start_run(run, make_plan(3), owner="flow:1/0")
    write_shard(store, run, 1, make_rows(range(10, 20)))
    ledger.mark_shard_failed(run.run_id, 2, "boom")
    summary = ledger.run_summary(run.run_id)
    assert summary is not None
    counts = summary.counts
    assert (counts.shards_total, counts.shards_done, counts.shards_failed, counts.rows_out) == (3, 1, 1, 10)
    (listed,) = ledger.recent_runs()
    counts = listed.counts
    assert (counts.shards_total, counts.shards_done, counts.shards_failed, counts.rows_out) == (3, 1, 1, 10)
    assert ledger.recent_runs(status="completed") == []
    assert [r.run_id for r in ledger.recent_runs(results_table=run.results_table)] == [run.run_id]


def test_a_run_is_over_once_neither_it_nor_any_shard_attempt_holds_a_live_lease(store: ResultStore) -> None:
    ledger, run = store.ledger, make_run()
    assert ledger.run_over(run.run_id) is None  # a run this ledger does not know
    ledger.start_run(run, make_plan(2), owner="host-a:1/0", lease_s=60)
    assert ledger.run_over(run.run_id) is False  # its planning process holds it
    assert ledger.record_attempt(run.run_id, 0, host="host-b", owner="host-b:7/1", lease_s=60) == 1
    ledger.release_run_lease(run.run_id, "host-a:1/0")  # the planning process is gone: abandoned
    assert ledger.run_summary(run.run_id).state() == "abandoned"  # type: ignore[union-attr]
    assert ledger.run_over(run.run_id) is False, "a worker elsewhere still scores shard 0"
    assert ledger.renew_shard_lease(run.run_id, 0, 1, "host-b:7/1", 0.0)  # that worker stops too
    assert ledger.run_over(run.run_id) is True
    ledger.start_run(run, make_plan(2), owner="host-c:1/0", lease_s=60)  # resumed: live again
    assert ledger.run_over(run.run_id) is False
    ledger.finish_run(run.run_id, "failed", owner="host-c:1/0")
    assert ledger.run_over(run.run_id) is True
