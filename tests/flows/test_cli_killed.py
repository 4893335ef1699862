"""``shardwise run`` killed with SIGKILL mid-shard: nothing of it is left running, and --resume is exact."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
from flow_data import execute, make_docs
from kill_helpers import paced

pytestmark = pytest.mark.slow

ROWS, ROWS_PER_S = 6_000, 1_000  # the killed run is paced: 6 s at least, so it is caught mid-shard


def _shardwise(*argv: str) -> list[str]:
    return [sys.executable, "-m", "shardwise.flows.cli", *argv, "--model", "tiny", "--shards", "1"]


def _kill_mid_shard(argv: list[str]) -> list[psutil.Process]:
    """Start the command, SIGKILL it once its progress shows rows scored; its child processes then."""
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    children: list[psutil.Process] = []
    for line in proc.stderr:
        done = re.search(r"progress: 0/1 shard, ([\d,]+)/", line)
        if done and int(done.group(1).replace(",", "")) > 0:
            children = psutil.Process(proc.pid).children(recursive=True)
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert children, "the run ended before it could be killed mid-shard"
    return children


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_sigkill_leaves_no_server_and_resume_is_exact(sqlite_url: str, tmp_path) -> None:
    make_docs(sqlite_url, ROWS)
    killed = _shardwise("run", "--source", sqlite_url, "--table", "docs", "--results-table", "resumed")
    children = _kill_mid_shard(
        [*paced(tmp_path / "counts", ROWS_PER_S, *killed[3:]), "--lease-s", "2", "--progress", "lines",
         "--progress-every", "0.2"]
    )  # fmt: skip
    assert any("uvicorn" in " ".join(p.cmdline()) for p in children), "no temporary server was running"

    deadline = time.monotonic() + 10
    while _alive(children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(children), [" ".join(p.cmdline())[:80] for p in _alive(children)]

    ((run_id, status),) = execute(sqlite_url, "select run_id, status from shardwise_runs")
    assert status == "running"  # nobody could record the end: the run was killed
    time.sleep(2)  # its lease (--lease-s 2) runs out: the run is abandoned, and a resume may take it
    resume = subprocess.run(
        [*killed, "--resume", run_id, "--progress", "none"], capture_output=True, text=True
    )
    assert resume.returncode == 0, resume.stderr
    clean = _shardwise("run", "--source", sqlite_url, "--table", "docs", "--results-table", "clean")
    assert subprocess.run([*clean, "--progress", "none"], capture_output=True).returncode == 0

    query = "select source_key, embedding from {} order by source_key"
    resumed, reference = (execute(sqlite_url, query.format(t)) for t in ("resumed", "clean"))
    assert len(resumed) == ROWS and resumed == reference
