"""After ``--resume`` the closing summary says, labelled, what this invocation scored and what the whole run
totals are; a run started afresh keeps its one line.

Shards commit chunks of 20 rows. Shard 1 commits its first chunk, then
fails for good, so the run fails with 20 of its rows in the table; the
resume scores the rest of shard 1 only: this invocation's rows are those,
not shard 1's whole count and not the run's.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import pytest
from flow_data import BAD_ROWS, execute, make_docs

from shardwise.flows.cli import main
from shardwise.flows.totals import closing_lines
from shardwise.pipeline.run_result import InvocationCounts, MergeTotals, RunResult
from shardwise.results import RunCounts

pytestmark = pytest.mark.usefixtures("prefect_harness")

ROWS = 300


def test_a_resumed_runs_summary_labels_this_invocation_and_the_whole_run(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    worker = importlib.import_module("shardwise.pipeline.worker")
    chunks = importlib.import_module("shardwise.pipeline.chunks")
    make_docs(sqlite_url, ROWS)
    monkeypatch.setattr(worker, "ChunkConfig", lambda rows: chunks.ChunkConfig(20))
    real_commit = chunks._commit

    def broken_after_one_chunk(writer: Any, chunk: Any) -> bool:
        if writer.shard_id == 1 and chunk.number == 1:
            raise ValueError("model output had the wrong shape (simulated, after chunk 0 committed)")
        return bool(real_commit(writer, chunk))

    monkeypatch.setattr(chunks, "_commit", broken_after_one_chunk)
    run = ["run", "--source", sqlite_url, "--table", "docs", "--model", "tiny", "--shards", "3"]
    assert main([*run, "--progress", "none"]) == 1
    first = capsys.readouterr().out.splitlines()
    ((run_id,),) = execute(sqlite_url, "select run_id from shardwise_runs")
    assert first[0].startswith(f"run {run_id} FAILED: "), first
    ((scored_before,),) = execute(sqlite_url, "select count(*) from shardwise_results")

    monkeypatch.setattr(chunks, "_commit", real_commit)
    assert main([*run, "--resume", run_id, "--progress", "none"]) == 0
    lines = capsys.readouterr().out.splitlines()
    ((shard_1_rows,),) = execute(sqlite_url, "select rows_out from shardwise_shards where shard_id = 1")
    now = ROWS - scored_before
    assert 0 < now < shard_1_rows, "shard 1 resumed after the chunk it had committed"
    assert lines[:3] == [
        f"run {run_id} completed (resumed) -> table shardwise_results",
        f"this invocation: {now} rows scored, 0 dead letters, 1 shard finished",
        f"whole run, resumes included: {ROWS} rows scored, {len(BAD_ROWS)} dead letters, 0 skipped, "
        "3/3 shards done",
    ]
    assert len(lines) == 4 and lines[3].startswith("cost unknown (no price set), "), "the whole run's"


def test_a_fresh_runs_summary_is_one_line_and_a_resumed_generators_states_its_tokens() -> None:
    summary = RunResult(
        run_id="r", status="completed", results_table="t", source="s", snapshot=None, model="m",
        model_version="v", code_version="c", started_by="cli",
        totals=RunCounts(rows_out=10, rows_failed=1, shards_done=2, shards_total=2, counts={}),
        merge=MergeTotals(inserted=9, updated=1, unchanged=0),
    )  # fmt: skip
    assert closing_lines(summary, failed=False) == [
        "run r completed: 10 rows scored (9 new, 1 updated, 0 unchanged), 1 dead letter, 0 skipped, "
        "2/2 shards done "
        "-> table t"
    ]
    resumed = dataclasses.replace(
        summary,
        resumed=True,
        this_invocation=InvocationCounts(rows_in=4, rows_out=4, rows_failed=0, shards_done=1),
        totals=dataclasses.replace(summary.totals, counts={"completion_tokens": 30, "prompt_tokens": 70}),
    )
    assert closing_lines(resumed, failed=True) == [
        "run r FAILED (resumed) -> table t",
        "this invocation: 4 rows scored, 0 dead letters, 1 shard finished",
        "whole run, resumes included: 10 rows scored, 1 dead letter, 0 skipped, 2/2 shards done, "
        "30 completion tokens, "
        "70 prompt tokens",
    ]
