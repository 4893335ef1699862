"""A worker killed with SIGKILL in the middle of a shard: the shard runs again, the results are exact.

The cluster is a real Dask ``LocalCluster`` of two worker processes on
loopback, started here so the test knows its workers' pids; the flow uses it
through ``address``. When a worker dies, Dask reschedules its shard on the
other one; the ledger counts the new attempt, the dead attempt's staged rows
died with its connection, and the merge happens once.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from flow_data import checksum, execute, synthetic_docs

from shardwise.flows.params import ScoreParams
from shardwise.flows.score import score

pytestmark = [pytest.mark.usefixtures("prefect_harness"), pytest.mark.postgres, pytest.mark.slow]

ROWS = 32_000
SHARDS = 8


def _params(url: str, table: str, **fanout: object) -> ScoreParams:
    # fp32: shards long enough (about 2 s each) for the killer to catch both workers inside one.
    return ScoreParams.model_validate(
        {
            "source": {"location": url, "table": "docs"},
            "model": {"name": "tiny"},
            "results": {"table": table},
            "run": {"shards": SHARDS, "precision": "fp32"},
            "fanout": {"threads": 1, **fanout},
        }
    )


def _kill_one_mid_shard(url: str, pids: list[int], killed: list[int], stop: threading.Event) -> None:
    """Once both workers are inside a shard (attempt counted, not merged), SIGKILL the first one."""
    busy = (
        "select count(*) filter (where s.attempts >= 1 and s.status <> 'done') from shardwise_shards s "
        "join shardwise_runs r using (run_id) where r.results_table = 'faulted'"
    )
    ledger = "select to_regclass('shardwise_shards') is not null"
    while not stop.is_set():
        if execute(url, ledger)[0][0] and execute(url, busy)[0][0] >= 2:
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])
            return
        time.sleep(0.05)


def test_a_dask_worker_killed_mid_shard_loses_and_duplicates_nothing(pg_url: str, dask_extra: None) -> None:
    from distributed import Client, LocalCluster

    synthetic_docs(pg_url, ROWS)
    clean = score(_params(pg_url, "clean", workers=1), return_state=True)
    assert clean.is_completed(), clean.message
    expected = checksum(pg_url, "clean")

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster) as client,
    ):
        pids = sorted(client.run(os.getpid).values())
        killed: list[int] = []
        stop = threading.Event()
        killer = threading.Thread(target=_kill_one_mid_shard, args=(pg_url, pids, killed, stop))
        killer.start()
        try:
            state = score(
                _params(pg_url, "faulted", runner="dask", address=cluster.scheduler_address),
                return_state=True,
            )
        finally:
            stop.set()
            killer.join(10)
    assert killed, "a worker was killed during the run"
    assert state.is_completed(), state.message
    assert checksum(pg_url, "faulted") == expected
    summary = state.result()
    attempts = execute(
        pg_url,
        "select sum(attempts), count(*) from shardwise_shards where run_id = :r",
        {"r": summary.run_id},
    )
    assert attempts[0][0] > SHARDS == attempts[0][1], "the killed worker's shard ran again"
    assert execute(pg_url, "select count(*), count(distinct source_key) from faulted") == [(expected[0],) * 2]
