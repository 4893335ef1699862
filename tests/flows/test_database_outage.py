"""The database goes away for longer than a shard's retries, mid-run, then comes back.

The shards that fail are recorded as failed with their own error once the
database is back (not left pending, not replaced by "could not record"), the
command prints the run id and how to resume, and the resume is exact.
Uses a PostgreSQL cluster of its own (tests/pg_cluster.py), never the shared one.
"""

from __future__ import annotations

import threading
import time

import pytest
from flow_data import execute, make_docs, slow_tiny_shards
from pg_cluster import OwnCluster

from shardwise.flows.cli import main

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

# Longer than a shard's whole retry chain, whatever the jitter draws: the chunk step's tries within
# one attempt (0.5 + 1 + 2 + 4 s, +25% at most: 9.4 s) and the task's three retries (2 + 4 + 8 s,
# +50% at most: 21 s), plus the attempts themselves. 25 s was within that chain's reach, so a run
# could ride the outage out and the test's "failed" never came.
OUTAGE_S = 40.0


def _outage_after_first_shard(cluster: OwnCluster, seen: list[str]) -> None:
    while not execute(cluster.url, "select count(*) from shardwise_shards where status = 'done'")[0][0]:
        time.sleep(0.05)
    cluster.stop()
    seen.append("stopped")
    time.sleep(OUTAGE_S)
    cluster.start()
    seen.append("started")


def _wait_for_ledger(url: str) -> None:
    while True:
        try:
            execute(url, "select 1 from shardwise_shards limit 1")
            return
        except Exception:
            time.sleep(0.05)


def test_an_outage_mid_run_is_recorded_and_resumed_exactly(
    own_pg_cluster: OwnCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = own_pg_cluster
    url = cluster.url
    make_docs(url, 600, bad=False)
    slow_tiny_shards(monkeypatch, 0.05, 0.2)
    common = ["--source", url, "--table", "docs", "--model", "tiny", "--shards", "6", "--progress", "none"]
    seen: list[str] = []

    def outage() -> None:
        _wait_for_ledger(url)
        _outage_after_first_shard(cluster, seen)

    thread = threading.Thread(target=outage)
    thread.start()
    try:
        code = main(["run", *common])
    finally:
        thread.join()
    captured = capsys.readouterr()
    assert seen == ["stopped", "started"]
    ((run_id, status, failed),) = execute(url, "select run_id, status, shards_failed from shardwise_runs")
    assert code == 1 and status == "failed" and failed >= 1, captured
    shards = execute(url, "select status, last_error from shardwise_shards order by shard_id")
    assert {s for s, _ in shards} <= {"done", "failed"}, shards  # none left pending
    assert all(error for s, error in shards if s == "failed"), shards
    assert all("could not record" not in (error or "") for _, error in shards)
    assert f"--resume {run_id}" in captured.err, captured.err

    assert main(["run", *common, "--resume", run_id]) == 0
    assert main(["run", *common, "--results-table", "clean"]) == 0
    query = "select source_key, embedding from {} order by source_key"
    resumed, clean = (execute(url, query.format(t)) for t in ("shardwise_results", "clean"))
    assert len(resumed) == 600 and resumed == clean
