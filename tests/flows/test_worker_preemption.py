"""One worker of a running ``shardwise run`` gets SIGTERM (a spot notice, an eviction): the run goes on.

The worker, mid-shard with a slow plug-in model (``plugin_slow``), lets its
shard go after the batch in hand, records it ``retrying`` with the reason,
and exits; the shard is scored on another worker (the process pool: the
flow runs it on a fresh pool, see ``shardwise/tasks/fanout.py``; Dask: the
scheduler runs the task again, see ``shardwise/pipeline/preemption.py``),
and the command exits 0 with exactly one result per row. The worker's own exit
status (0) is checked in ``tests/pipeline/test_preemption.py``, where the
test is its parent; here its parent is the command.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from flow_data import execute, make_docs
from kill_helpers import survivors

pytestmark = pytest.mark.slow

PLUGINS = Path(__file__).resolve().parent.parent / "models"
ROWS = 400
ROW_S = "0.03"
"""Seconds the plug-in sleeps per row: each shard of 200 rows takes 6 s or more, time to stop its worker."""
GONE_WITHIN_S = 15.0
"""How soon the stopped worker must be gone: a batch, up to 2 s for its task, and slack for a busy host."""


def _argv(url: str, runner: str) -> list[str]:
    return [
        sys.executable, "-m", "shardwise.flows.cli", "run", "--source", url, "--table", "docs",
        "--model", "plugin_slow:spec", "--precision", "fp32", "--shards", "2", "--workers", "2",
        "--runner", runner, "--max-tokens", "64", "--results-table", "scored", "--progress", "none",
    ]  # fmt: skip


def _environment() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "SHARDWISE_TEST_SLOW_ROW_S": ROW_S}


def _scoring_worker(url: str, command: subprocess.Popen[str]) -> tuple[int, int]:
    """The shard a worker is scoring, once it has scored some rows, and that worker's pid."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert command.poll() is None, "the run ended before a worker could be stopped"
        try:
            held = execute(
                url,
                "select shard_id, owner from shardwise_shards where status = 'running' "
                "and coalesce(progress_rows, 0) > 0",
            )
        except Exception:  # the ledger's tables are not there yet
            held = []
        for shard_id, owner in held:
            return int(shard_id), int(owner.split(":", 1)[1].split("/", 1)[0])
        time.sleep(0.1)
    raise AssertionError("no worker was seen scoring a shard")


def _preempted_run(url: str, runner: str) -> None:
    make_docs(url, ROWS, bad=False)
    command = subprocess.Popen(
        _argv(url, runner), env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        shard_id, pid = _scoring_worker(url, command)
        worker = psutil.Process(pid)
        assert pid != command.pid and command.pid in [p.pid for p in worker.parents()]
        os.kill(pid, signal.SIGTERM)
        assert survivors({worker: f"worker {pid}"}, GONE_WITHIN_S) == [], "the stopped worker did not exit"
        output, _ = command.communicate(timeout=300)
    finally:
        if command.poll() is None:
            command.kill()
            command.wait()
    assert command.returncode == 0, output[-3000:]
    said = f"shard {shard_id} try 1 let go: WorkerPreempted: worker preempted (SIGTERM)"
    assert said in output, output[-3000:]
    if runner == "process":  # its exit broke the pool: the flow runs the shard on a fresh one
        again = re.search(
            r"let go by a preempted worker \(SIGTERM\); scheduled again on fresh workers: ([\d, ]+)", output
        )
        assert again is not None, output[-3000:]
        scheduled = {int(s) for s in again.group(1).split(",")}
        # The broken pool stops its other worker too (SIGTERM, as CPython ends a broken pool's processes):
        # a shard still running there is let go the same way, and scheduled again with it.
        for other in scheduled - {shard_id}:
            assert f"shard {other} try 1 let go: WorkerPreempted: worker preempted (SIGTERM)" in output, (
                output[-3000:]
            )
        assert shard_id in scheduled, output[-3000:]

    ((rows, keys),) = execute(url, "select count(*), count(distinct source_key) from scored")
    assert rows == keys == ROWS, f"{rows} results for {keys} keys; the table has {ROWS} rows"
    statuses = execute(url, "select status, count(*) from shardwise_shards group by status")
    assert statuses == [("done", 2)]
    moves = execute(
        url,
        "select from_status, to_status, error from shardwise_shard_transitions "
        "where shard_id = :s order by at, attempt",
        {"s": shard_id},
    )
    path = [(a, b) for a, b, _ in moves]
    let_go = path.index(("running", "retrying"))
    assert path[let_go + 1 :] == [("retrying", "running"), ("running", "done")], path
    assert moves[let_go][2].startswith("WorkerPreempted: worker preempted (SIGTERM)"), moves[let_go][2]


def test_a_process_pool_worker_stopped_mid_shard_lets_the_run_finish(sqlite_url: str) -> None:
    _preempted_run(sqlite_url, "process")


def test_a_dask_worker_stopped_mid_shard_lets_the_run_finish(sqlite_url: str, dask_extra: None) -> None:
    _preempted_run(sqlite_url, "dask")


def test_a_process_pool_worker_that_crashes_fails_its_shard_for_resume(sqlite_url: str) -> None:
    """SIGKILL (the OOM killer) is no preemption: the crashed worker's shard stays running in the
    ledger, so the flow schedules nothing again, and the run fails that shard for ``--resume``."""
    make_docs(sqlite_url, ROWS, bad=False)
    command = subprocess.Popen(
        _argv(sqlite_url, "process"),
        env=_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        shard_id, pid = _scoring_worker(sqlite_url, command)
        os.kill(pid, signal.SIGKILL)
        output, _ = command.communicate(timeout=300)
    finally:
        if command.poll() is None:
            command.kill()
            command.wait()
    assert command.returncode not in (0, None), output[-3000:]
    assert "scheduled again on fresh workers" not in output, output[-3000:]
    assert "--resume" in output, output[-3000:]
    ((status, error),) = execute(
        sqlite_url, "select status, last_error from shardwise_shards where shard_id = :s", {"s": shard_id}
    )
    assert status == "failed" and "BrokenProcessPool" in error, (status, error)
