"""``shardwise run`` SIGKILLed mid-shard on another host: refused while its lease lives, then abandoned, then
resumed.

The run is killed here, and its owner then rewritten to another host's: of a
process on another host only its lease's expiry tells that it died (a run
killed on this host is resumed at once, see ``test_cli_resume_at_once.py``).
The killed run's lease is short (``--lease-s 6``) so that it expires within
the test. While it is live, a resume is refused before anything runs; once
it expired, ``shardwise runs`` and ``shardwise plan`` show the run as
abandoned, a plain ``--resume`` takes it, its attempts count on, and the
killed run's Prefect flow run ends Crashed.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from flow_data import execute, make_docs
from kill_helpers import paced

from shardwise.flows.cli import main

pytestmark = pytest.mark.slow

ROWS, ROWS_PER_S = 4_000, 500  # the killed run is paced: 4 s a shard at least, so it is caught mid-shard


def _cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "shardwise.flows.cli", *argv]


def _kill_mid_first_shard(argv: list[str]) -> None:
    """Start the command, SIGKILL it once the first of its shards has rows scored."""
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        done = re.search(r"progress: 0/2 shards, ([\d,]+)/", line)
        if done and int(done.group(1).replace(",", "")) > 0:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed mid-shard"


def _flow_run_state(flow_run_id: str) -> str | None:
    """The flow run's state in the database of Prefect's temporary server, which outlives it."""
    from prefect.settings import get_current_settings

    path = get_current_settings().home / "prefect.db"
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        found = conn.execute("select state_type from flow_run where id = ?", (flow_run_id,)).fetchone()
    finally:
        conn.close()
    return None if found is None else str(found[0])


def test_a_killed_run_is_held_until_its_lease_expires_then_shows_abandoned_and_resumes(
    sqlite_url: str, capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    if os.environ.get("PREFECT_API_URL"):
        pytest.skip("checks the temporary server's database; unset PREFECT_API_URL")
    make_docs(sqlite_url, ROWS, bad=False)
    source = ["--source", sqlite_url, "--table", "docs", "--model", "tiny", "--shards", "2"]
    _kill_mid_first_shard(
        paced(tmp_path / "counts", ROWS_PER_S, "run", *source, "--lease-s", "6", "--progress", "lines",
              "--progress-every", "0.2")
    )  # fmt: skip
    ((run_id, status, owner),) = execute(sqlite_url, "select run_id, status, owner from shardwise_runs")
    assert status == "running", "nobody could record the end"
    elsewhere = "another-host:" + owner.split(":", 1)[1]
    execute(sqlite_url, "update shardwise_runs set owner = :owner", {"owner": elsewhere})
    shards = "select shard_id, status, attempts from shardwise_shards order by shard_id"
    assert execute(sqlite_url, shards) == [(0, "running", 1), (1, "pending", 0)]  # as the kill left it
    scored = execute(sqlite_url, "select count(*) from shardwise_results")

    assert main(["run", *source, "--resume", run_id]) == 2, "its lease is live: another resume waits"
    err = capsys.readouterr().err
    assert "is still running on" in err and f"--resume {run_id} --force" in err
    assert execute(sqlite_url, shards) == [(0, "running", 1), (1, "pending", 0)], "nothing ran"
    assert execute(sqlite_url, "select count(*) from shardwise_results") == scored

    deadline, out = time.monotonic() + 20, ""
    while "abandoned" not in out and time.monotonic() < deadline:
        time.sleep(0.5)
        assert main(["runs", "--results", sqlite_url]) == 0
        out = capsys.readouterr().out
    header, row, advice = out.splitlines()
    assert header.split() == [
        *("RUN", "ID", "STATUS", "STARTED", "(UTC)", "OWNER", "LEASE", "SHARDS", "ROWS"),
        *("TOKENS", "DEVICE-H", "COST"),
    ]
    assert row.split()[:2] == [run_id, "abandoned"] and "0/2" in row and "expired" in row
    assert advice.startswith(f"run {run_id} is abandoned") and f"--resume {run_id}" in advice

    assert main(["plan", *source]) == 0
    assert f"run {run_id} is abandoned (0/2 shards done" in capsys.readouterr().out

    resumed = subprocess.run(
        _cli("run", *source, "--resume", run_id, "--progress", "none"), capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {run_id} completed" in resumed.stdout
    assert execute(sqlite_url, shards) == [(0, "done", 2), (1, "done", 1)], (
        "attempts count on across a resume"
    )
    assert execute(sqlite_url, "select count(*) from shardwise_results") == [(ROWS,)]
    assert _flow_run_state(run_id) == "CRASHED", "the killed run's flow run no longer says Running"
    assert main(["runs", "--results", sqlite_url]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:2] == [run_id, "completed"]
