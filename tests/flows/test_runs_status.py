"""A run its budget stopped is listed as ``stopped``, not ``failed`` (issue 45): nothing went wrong, and
``--resume RUN_ID`` with a larger budget goes on; the ledger keeps it resumable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flow_data import execute, make_docs
from hf_builders import tiny_causal_lm

from shardwise.flows.cli import main

pytestmark = [pytest.mark.usefixtures("prefect_harness", "chunks_of_4")]
pytest.importorskip("transformers")


def test_a_run_its_budget_stopped_is_listed_as_stopped_everywhere_runs_are_listed(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lm = tiny_causal_lm(tmp_path / "lm", context=4096)
    make_docs(sqlite_url, 40)
    options = ["--source", sqlite_url, "--table", "docs", "--model", str(lm), "--precision", "fp32",
               "--shards", "2", "--max-new-tokens", "4", "--chat", "off"]  # fmt: skip
    argv = ["run", *options, "--progress", "none"]
    assert main(["plan", *options, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    budget = (plan["prompt_tokens"] + plan["max_completion_tokens"]) // 2  # a chunk fits; the run does not
    assert main([*argv, "--budget-tokens", str(budget)]) == 1
    capsys.readouterr()
    ((run_id, status),) = execute(sqlite_url, "select run_id, status from shardwise_runs")
    assert status == "failed", "the ledger keeps it resumable"

    assert main(["runs", "--results", sqlite_url, "--json"]) == 0
    (listed,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (listed["run_id"], listed["status"], listed["past_budget"]) == (run_id, "stopped", None)
    assert main(["runs", "--results", sqlite_url]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith(run_id)]
    assert row.split()[1] == "stopped", row

    assert main([*argv, "--resume", run_id, "--budget-tokens", "1000000"]) == 0
    capsys.readouterr()
    assert main(["runs", "--results", sqlite_url, "--json"]) == 0
    (listed,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (listed["status"], listed["past_budget"]) == ("completed", None), "well within its budget"
