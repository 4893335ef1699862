"""Issue 24's done-when: a kill -9 of a process-runner run leaves no process behind, and ``--resume`` right
after it, without ``--force``, completes exactly.

The killed run holds a lease of the default 60 s, live at the resume; its
owner is a process of this host that is gone (pid and start time), so the
resume takes it at once. Exactly: every row of the source has one result,
equal to an uninterrupted run's, and every bad row one dead letter.
"""

from __future__ import annotations

import subprocess

import pytest
from flow_data import BAD_ROWS, docs_spec, execute, make_docs
from kill_helpers import cli, kill_once_scoring, survivors

from shardwise.db.codec import decode_timestamp, utc_now

pytestmark = pytest.mark.slow

ROWS = 40_000  # two shards of 20,000: killed at 17,000 rows, each has committed a chunk (8,192) or more,
# and neither is near its end (at 24,000 a busy machine let a shard finish before the kill)


def test_a_killed_process_runner_run_leaves_nothing_and_resumes_at_once_exactly(
    sqlite_url: str, pipeline
) -> None:
    make_docs(sqlite_url, ROWS)
    run = cli(
        "run", "--source", sqlite_url, "--table", "docs", "--model", "tiny", "--shards", "2",
        "--results-table", "resumed", "--runner", "process", "--workers", "2",
    )  # fmt: skip
    killed = kill_once_scoring(run, workers="multiprocessing.spawn", rows=17_000)
    # Workers die with the run at once; the server's guard polls every 0.5 s and allows 5 s for SIGTERM.
    left = survivors(killed, within_s=10.0)
    assert left == [], "no worker and no Prefect server outlives the killed run"

    ((run_id, status, expires),) = execute(
        sqlite_url, "select run_id, status, lease_expires_at from shardwise_runs"
    )
    assert status == "running" and decode_timestamp(expires) > utc_now(), "its lease is still live"
    ((chunks,),) = execute(sqlite_url, "select count(*) from shardwise_chunks")
    assert chunks >= 1, "the kill came after a chunk had committed"

    resumed = subprocess.run([*run, "--resume", run_id, "--progress", "none"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {run_id} completed" in resumed.stdout, resumed.stdout

    _, counts = pipeline.run(docs_spec(sqlite_url, shards=2, results_table="clean"), "uninterrupted")
    assert counts.rows_out == ROWS
    query = "select source_key, embedding from {} order by source_key"
    got, expected = (execute(sqlite_url, query.format(table)) for table in ("resumed", "clean"))
    assert len(got) == ROWS and got == expected, "every row once, as an uninterrupted run scores it"
    letters = "select source_key from shardwise_errors where run_id = :r order by source_key"
    dead = execute(sqlite_url, letters, {"r": run_id})
    assert dead == execute(sqlite_url, letters, {"r": "uninterrupted"}) and len(dead) == len(BAD_ROWS)
