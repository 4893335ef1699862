"""The ``shardwise run`` that loses its run to ``--resume RUN_ID --force`` exits 4 (taken over), not 2 (bad
input), with one line naming the process that took the run, and no advice to resume what another finishes.

The first command is paced (``counted_cli.py``, 100 rows a second, a chunk
every 250 rows), so it still scores when the forced resume, in this
process, takes the run over and completes it. It learns so at its next
renewal; its next chunk finds the shard done, and finishing the run finds it
owned by the other process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from flow_data import execute, make_docs

from shardwise.errors import RunTakenOverError
from shardwise.flows.cli import main
from shardwise.flows.outcome import TAKEN_OVER, code_for

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

ROWS = 3_000
COUNTED = Path(__file__).with_name("counted_cli.py")


def test_the_process_that_lost_its_run_to_a_forced_resume_exits_4_naming_who_took_it(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, ROWS, bad=False)
    source = ["--source", sqlite_url, "--table", "docs", "--model", "tiny", "--shards", "1"]
    first = subprocess.Popen(
        [sys.executable, str(COUNTED), str(tmp_path / "counts"), "100", "run", *source, "--lease-s", "2",
         "--progress", "lines", "--progress-every", "0.2"],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "COUNTED_CHUNK_ROWS": "250"},
    )  # fmt: skip
    lines: list[str] = []
    scoring = threading.Event()

    def read() -> None:
        assert first.stderr is not None
        for line in first.stderr:
            lines.append(line)
            found = re.search(r"progress: 0/1 shard, ([\d,]+)/", line)
            if found and int(found.group(1).replace(",", "")) > 0:
                scoring.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert scoring.wait(180), "".join(lines)
        ((run_id,),) = execute(sqlite_url, "select run_id from shardwise_runs")
        assert main(["run", *source, "--resume", run_id, "--force", "--progress", "none"]) == 0
        assert f"run {run_id} completed" in capsys.readouterr().out
        ((winner,),) = execute(sqlite_url, "select owner from shardwise_runs")
        assert first.wait(120) == TAKEN_OVER
    finally:
        first.kill()
    reader.join(10)
    errors = [line for line in lines if line.startswith("shardwise: error:")]
    assert errors == [
        f"shardwise: error: run '{run_id}' was taken over by {winner} (resume --force) while "
        f"{errors[0].split(' while ', 1)[1].split(' ran it')[0]} ran it, so that process finishes it; the "
        "shards this one merged stay merged\n"
    ], "".join(lines[-10:])
    assert not any("--resume" in line for line in lines), "nothing to resume: the other process finishes it"
    assert execute(sqlite_url, "select status from shardwise_runs") == [("completed",)]
    assert execute(sqlite_url, "select count(*) from shardwise_results") == [(ROWS,)]


def test_a_lost_run_maps_to_its_own_exit_code() -> None:
    assert code_for(RunTakenOverError("run 'x' was taken over by h:1/0")) == TAKEN_OVER == 4
