"""The connection holding a run's exported snapshot dies after planning: the run still completes.

Reads that come after the loss take a fresh snapshot, and lineage says so
(``input_snapshot``); the run is not reported as failed, let alone as never started.
"""

from __future__ import annotations

import threading
import time

import pytest
from flow_data import execute, make_docs, slow_tiny_shards

from shardwise.flows.cli import main

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("prefect_harness")]


def _terminate_holder_after_first_shard(url: str, stop: threading.Event) -> list[int]:
    """Once a shard is done, terminate the backends idle in a transaction: the snapshot holder."""
    killed: list[int] = []
    while not stop.is_set():
        try:
            done = execute(url, "select count(*) from shardwise_shards where status = 'done'")[0][0]
        except Exception:  # the ledger is not there yet
            done = 0
        if done:
            killed += [
                row[0]
                for row in execute(
                    url,
                    "select pid from pg_stat_activity where datname = current_database() "
                    "and state = 'idle in transaction' and pid <> pg_backend_pid()",
                )
            ]
            for pid in killed:
                execute(url, "select pg_terminate_backend(:pid)", {"pid": pid})
            return killed
        time.sleep(0.05)
    return killed


def test_a_lost_snapshot_holder_does_not_fail_a_finished_run(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(pg_url, 400, bad=False)
    slow_tiny_shards(monkeypatch, 0.02, 0.05)
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=lambda: killed.extend(_terminate_holder_after_first_shard(pg_url, stop)))
    killer.start()
    try:
        code = main(["run", "--source", pg_url, "--table", "docs", "--model", "tiny", "--shards", "4"])
    finally:
        stop.set()
        killer.join()
    out = capsys.readouterr().out
    assert killed, "the snapshot holder was never found idle in its transaction"
    assert code == 0, out
    assert "completed: 400 rows scored" in out and "4/4 shards done" in out
    assert execute(pg_url, "select status, rows_out from shardwise_runs") == [("completed", 400)]
    assert execute(pg_url, "select count(*) from shardwise_results") == [(400,)]


def test_a_server_that_ends_idle_transactions_is_detected_and_named(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """idle_in_transaction_session_timeout shorter than the run: the snapshot holder dies mid-run."""
    make_docs(pg_url, 300, bad=False)
    execute(
        pg_url,
        "do $$ begin execute format('alter database %I set idle_in_transaction_session_timeout = "
        "''1s''', current_database()); end $$",
    )
    slow_tiny_shards(monkeypatch, 0.03, 0.05)
    code = main(
        ["run", "--source", pg_url, "--table", "docs", "--model", "tiny", "--shards", "3", "--verbose"]
    )
    assert code == 0
    assert "idle_in_transaction_session_timeout" in caplog.text and "more than 1.0 s" in caplog.text
    assert execute(pg_url, "select status, rows_out from shardwise_runs") == [("completed", 300)]
    snapshots = execute(pg_url, "select distinct input_snapshot is null from shardwise_results")
    assert (False,) in snapshots, "no shard read at a fresh snapshot: the run outlived no timeout"
