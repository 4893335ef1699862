"""Budget holds (``shardwise_budget_holds``): the shards of a budgeted run reserve each chunk in the ledger
beside the chunks the others hold in flight, and a dead worker's hold lapses with its lease, on SQLite
and on real PostgreSQL."""

from __future__ import annotations

import dataclasses
import functools

import pytest
from results_helpers import make_plan, make_run, nth_chunk

from shardwise.cost.budget import Budget, BudgetGuard, decide
from shardwise.cost.usage import ChunkUsage
from shardwise.errors import BudgetReached
from shardwise.results import ResultStore
from shardwise.results.schema import LEDGER_TABLES

OWNERS = ("host-a:1/0", "host-b:2/0", "host-c:3/0")


def _commit(store: ResultStore, run_id: str, shard_id: int, attempt: int, number: int, cost: float) -> None:
    run = store.ledger.load_run(run_id)
    assert run is not None
    chunk = dataclasses.replace(nth_chunk(number), usage=ChunkUsage("cpu", 1.0, cost))
    with store.chunk_writer(run, shard_id, attempt) as writer:
        assert writer.commit(chunk).status == "merged"


def test_each_chunk_is_held_beside_the_others_in_flight_and_a_dead_workers_hold_lapses(
    store: ResultStore,
) -> None:
    assert "shardwise_budget_holds" in LEDGER_TABLES
    ledger, run = store.ledger, make_run()
    ledger.start_run(run, make_plan(3))
    attempts = [ledger.record_attempt(run.run_id, s, owner=o, lease_s=60) for s, o in enumerate(OWNERS)]
    budget = Budget(usd=0.35)
    rule = functools.partial(decide, budget)

    def reserve(shard_id: int, chunk: int) -> bool:
        attempt = attempts[shard_id]
        assert attempt is not None
        return ledger.reserve_chunk(run.run_id, shard_id, attempt, OWNERS[shard_id], chunk, rule)

    assert reserve(0, 0), "the run's first chunk goes alone"
    assert not reserve(1, 0), "no chunk has an estimate yet, and shard 0's first one is in flight: wait"
    _commit(store, run.run_id, 0, 1, 0, cost=0.10)
    assert reserve(1, 0), "$0.10 committed, shard 0's committed chunk no longer held, $0.10 for this one"
    assert reserve(0, 1), "$0.10 committed, shard 1's $0.10 in flight and this one's: $0.30"
    with pytest.raises(BudgetReached, match=r"\$0.1 spent and \$0.2 in flight of the \$0.35 budget"):
        reserve(2, 0)  # each worker counting only its own chunk in flight would have taken it: $0.20

    assert ledger.renew_shard_lease(run.run_id, 1, 1, OWNERS[1], 0.0), "shard 1's worker stops renewing"
    assert reserve(2, 0), "its hold lapsed with its lease: $0.10 + $0.10 + $0.10"
    assert ledger.record_attempt(run.run_id, 0, owner="host-d:4/0", lease_s=60) == 2
    attempts[0] = None
    with ledger.reading("read the holds") as conn:
        held = conn.exec_driver_sql("select shard_id, chunk from shardwise_budget_holds order by 1").all()
    assert [tuple(r) for r in held] == [(0, 1), (1, 0), (2, 0)], "one hold a shard, the latest"


def test_a_guard_waits_for_the_runs_first_chunk_then_goes_on(store: ResultStore) -> None:
    ledger, run = store.ledger, make_run()
    ledger.start_run(run, make_plan(2))
    first, second = (ledger.record_attempt(run.run_id, s, owner=OWNERS[s], lease_s=60) for s in (0, 1))
    assert first == second == 1
    budget = Budget(usd=1.0)
    reserve = [functools.partial(ledger.reserve_chunk, run.run_id, s, 1, OWNERS[s]) for s in (0, 1)]
    BudgetGuard(budget, reserve[0]).check(0)
    waits: list[float] = []

    def meanwhile(seconds: float) -> None:  # shard 0's worker commits its first chunk while shard 1 waits
        waits.append(seconds)
        if len(waits) == 2:
            _commit(store, run.run_id, 0, 1, 0, cost=0.25)

    BudgetGuard(budget, reserve[1], sleep=meanwhile).check(0)
    assert len(waits) == 2, "it waited until the first chunk was committed, then held its own"
    with pytest.raises(BudgetReached, match=r"\$0.25 spent and \$0.25 in flight of the \$0.6 budget"):
        BudgetGuard(Budget(usd=0.6), reserve[0]).check(1)  # its next chunk would make it $0.75
