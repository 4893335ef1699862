"""``shardwise run`` killed with SIGKILL at 90% of a big shard: ``--resume`` scores again at most one chunk.

The command runs under ``counted_cli.py``, which appends every forward
pass's row count to a file and paces scoring, so the test knows exactly how
many rows the model saw before the kill and after the resume. The rows
scored twice are those the killed run had scored but not committed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from flow_data import execute, make_docs

pytestmark = pytest.mark.slow

ROWS, CHUNK = 10_000, 2_048  # chunks of 2,048 rows (COUNTED_CHUNK_ROWS), as a big run's of 8,192
ROWS_PER_S = 800  # the last 10% take 1.25 s: longer than the 1 s between a shard's progress reports
COUNTED = Path(__file__).with_name("counted_cli.py")


def _run(counts: Path, *argv: str, rows_per_s: int = ROWS_PER_S) -> list[str]:
    head = [str(COUNTED), str(counts), str(rows_per_s)]  # a clean run's batches are cut as the others'
    # fp32: "auto" times the model on this CPU to choose, and so may choose differently per run.
    model = ("--model", "tiny", "--precision", "fp32", "--threads", "1")
    return [sys.executable, *head, *argv, *model, "--shards", "1"]


def _kill_at(argv: list[str], share: float) -> int:
    """Start the command and SIGKILL it once its progress line shows ``share`` of the rows scored."""
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=_CHUNKED)
    assert proc.stderr is not None
    shown = 0
    for line in proc.stderr:
        done = re.search(r"progress: 0/1 shard, ([\d,]+)/([\d,]+) rows", line)
        if done and int(done.group(1).replace(",", "")) >= share * int(done.group(2).replace(",", "")):
            shown = int(done.group(1).replace(",", ""))
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert shown, "the run ended before its progress reached the share to kill it at"
    return shown


_CHUNKED = {**os.environ, "COUNTED_CHUNK_ROWS": str(CHUNK)}
"""The environment of the counted commands: each shard commits every CHUNK rows."""


def _counted(path: Path) -> int:
    return sum(int(n) for n in path.read_text().split())


def test_a_run_killed_at_90_percent_resumes_after_its_last_chunk(sqlite_url: str, tmp_path: Path) -> None:
    make_docs(sqlite_url, ROWS, bad=False)
    source = ("run", "--source", sqlite_url, "--table", "docs")
    first, again = tmp_path / "first.counts", tmp_path / "resume.counts"
    shown = _kill_at(
        _run(
            first,
            *source,
            "--results-table",
            "resumed",
            "--lease-s",
            "2",
            "--progress",
            "lines",
            "--progress-every",
            "0.2",
        ),
        0.9,
    )
    scored = _counted(first)
    ((run_id,),) = execute(sqlite_url, "select run_id from shardwise_runs")
    ((chunks, committed),) = execute(
        sqlite_url,
        "select count(*), coalesce(sum(rows_in), 0) from shardwise_chunks where run_id = :r",
        {"r": run_id},
    )
    time.sleep(2.5)  # its lease (--lease-s 2) runs out: the run is abandoned, and a resume may take it

    resume = subprocess.run(
        _run(again, *source, "--results-table", "resumed", "--resume", run_id, "--progress", "none"),
        capture_output=True,
        text=True,
        timeout=600,
        env=_CHUNKED,
    )
    assert resume.returncode == 0, resume.stderr
    rescored = _counted(again)
    ((engine,),) = execute(sqlite_url, "select engine from shardwise_shards where run_id = :r", {"r": run_id})

    twice = scored + rescored - ROWS
    print(
        f"\nkilled when progress showed {shown:,}/{ROWS:,} rows ({shown / ROWS:.0%}); the model had scored "
        f"{scored:,}; {committed:,} were committed in {chunks} chunks of {CHUNK:,}. The resume "
        f"scored {rescored:,} = the {ROWS - committed:,} not committed. Rows scored twice: {twice:,} "
        f"(scored but not committed at the kill; one chunk is {CHUNK:,})"
    )
    assert committed >= 4 * CHUNK and committed % CHUNK == 0
    assert rescored == ROWS - committed, "the resume scored rows that a chunk had committed"
    assert twice == scored - committed and 0 <= twice <= CHUNK
    assert f'"resumed_rows": {committed}' in engine

    unpaced = ("--results-table", "clean", "--progress", "none")
    clean = subprocess.run(
        _run(tmp_path / "clean.counts", *source, *unpaced, rows_per_s=0),
        capture_output=True,
        text=True,
        timeout=600,
        env=_CHUNKED,
    )
    assert clean.returncode == 0, clean.stderr
    query = "select source_key, embedding, input_fingerprint from {} order by source_key"
    resumed, reference = (execute(sqlite_url, query.format(t)) for t in ("resumed", "clean"))
    assert len(resumed) == len(reference) == ROWS
    differ = [a[0] for a, b in zip(resumed, reference, strict=True) if a != b]  # a short message, not a diff
    assert not differ, f"{len(differ)} rows differ from a clean run's, e.g. keys {differ[:5]}"
    ((rows_in, status),) = execute(
        sqlite_url, "select rows_in, status from shardwise_runs where run_id = :r", {"r": run_id}
    )
    assert (rows_in, status) == (ROWS, "completed")
