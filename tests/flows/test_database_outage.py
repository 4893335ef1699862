"""PostgreSQL goes away mid-run and comes back: an outage shorter than the retry deadline, and a longer one.

The run's source, results and ledger are one PostgreSQL cluster of the
test's own (tests/pg_cluster.py), never the shared one, stopped after the
first shard is done and started again ``OUTAGE_S`` later.

Shorter than ``--retry-deadline``: every shard rides it out (its steps
retry on the shard's one clock) and the run completes with exactly the
results of a run that met no outage. Longer: each shard that met it fails
once its deadline has passed, not later (the task's retries do not multiply
the deadline), with one reason naming the deadline; the failures are
recorded once the database is back (not left pending), the command says how
to resume, and the resume is exact.
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from flow_data import execute, make_docs, slow_tiny_shards
from pg_cluster import OwnCluster

from shardwise.flows.cli import main

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

QUERY = "select source_key, embedding from {} order by source_key"


def _outage_after_first_shard(cluster: OwnCluster, outage_s: float, seen: list[str]) -> None:
    while True:  # the ledger exists once the run is planned
        try:
            if execute(cluster.url, "select count(*) from shardwise_shards where status = 'done'")[0][0]:
                break
        except Exception:
            pass
        time.sleep(0.05)
    cluster.stop()
    seen.append("stopped")
    time.sleep(outage_s)
    cluster.start()
    seen.append("started")


def _run_through_outage(cluster: OwnCluster, outage_s: float, args: list[str]) -> tuple[int, list[str]]:
    seen: list[str] = []
    thread = threading.Thread(target=_outage_after_first_shard, args=(cluster, outage_s, seen))
    thread.start()
    try:
        code = main(["run", *args])
    finally:
        thread.join()
    return code, seen


def _common(url: str, deadline_s: float) -> list[str]:
    return [
        "--source", url, "--table", "docs", "--model", "tiny", "--shards", "6", "--progress", "none",
        "--retry-deadline", str(deadline_s),
    ]  # fmt: skip


def test_an_outage_shorter_than_the_deadline_is_ridden_out_exactly(
    own_pg_cluster: OwnCluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    url = own_pg_cluster.url
    make_docs(url, 600, bad=False)
    slow_tiny_shards(monkeypatch, 0.05, 0.2)
    code, seen = _run_through_outage(own_pg_cluster, 8.0, _common(url, 20))
    log = caplog.text  # the log records: Prefect's console may hold a stderr from before capsys swapped it
    assert seen == ["stopped", "started"]
    ((status, failed, done),) = execute(url, "select status, shards_failed, shards_done from shardwise_runs")
    assert (code, status, failed, done) == (0, "completed", 0, 6)
    moves = execute(url, "select to_status, count(*) from shardwise_shard_transitions group by to_status")
    assert "failed" not in dict(moves), moves  # a try that was tried again never marked its shard failed
    retried = [line for line in log.splitlines() if " failed on try " in line]
    assert retried and all("given up 20 s in" in line for line in retried), log  # the outage was met
    assert main(["run", *_common(url, 20), "--results-table", "clean"]) == 0
    scored, clean = (execute(url, QUERY.format(t)) for t in ("shardwise_results", "clean"))
    assert len(scored) == 600 and scored == clean


def test_an_outage_longer_than_the_deadline_fails_the_shard_at_the_deadline_naming_it(
    own_pg_cluster: OwnCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = own_pg_cluster.url
    make_docs(url, 600, bad=False)
    slow_tiny_shards(monkeypatch, 0.05, 0.2)
    deadline_s = 4.0
    code, seen = _run_through_outage(own_pg_cluster, 15.0, _common(url, deadline_s))
    captured = capsys.readouterr()
    assert seen == ["stopped", "started"]
    ((run_id, status, failed),) = execute(url, "select run_id, status, shards_failed from shardwise_runs")
    assert code == 1 and status == "failed" and failed >= 1, captured
    shards = execute(url, "select status, last_error from shardwise_shards order by shard_id")
    assert {s for s, _ in shards} <= {"done", "failed"}, shards  # none left pending
    errors = [error for s, error in shards if s == "failed"]
    print(f"\n{len(errors)} of 6 shards failed:", *errors, sep="\n")
    assert all("RetryDeadlineError" in e and "retry deadline of 4 s" in e for e in errors), errors
    for error in errors:  # given up once the deadline passed, not a task retry's worth later
        took = float(re.search(r"kept failing for ([\d.]+) s", error)[1])  # type: ignore[index]
        assert deadline_s <= took < deadline_s + 2, error
    assert f"--resume {run_id}" in captured.err, captured.err
    finals = execute(
        url,
        "select shard_id, count(*) from shardwise_shard_transitions where to_status = 'failed' "
        "group by shard_id",
    )
    assert len(finals) == failed and all(n == 1 for _, n in finals), finals  # failed once: at the end

    assert main(["run", *_common(url, deadline_s), "--resume", run_id]) == 0
    assert main(["run", *_common(url, deadline_s), "--results-table", "clean"]) == 0
    resumed, clean = (execute(url, QUERY.format(t)) for t in ("shardwise_results", "clean"))
    assert len(resumed) == 600 and resumed == clean
