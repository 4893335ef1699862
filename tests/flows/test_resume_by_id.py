"""``shardwise run --resume RUN_ID`` needs only what finds the run's ledger (issue 45): the run's own
parameters come from its record; budgets, runner, workers, threads and retry settings may change; any other
option given must agree with the stored run, or is refused naming it."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from cli_helpers import one_line
from flow_data import execute, make_docs
from hf_builders import tiny_causal_lm

from shardwise.flows.cli import main

pytestmark = [pytest.mark.usefixtures("prefect_harness", "chunks_of_4")]
pytest.importorskip("transformers")


def test_a_run_resumes_by_its_id_and_what_finds_its_ledger_alone(
    sqlite_url: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    lm = tiny_causal_lm(tmp_path / "lm", context=4096)
    make_docs(sqlite_url, 24)
    argv = ["run", "--source", sqlite_url, "--table", "docs", "--model", str(lm), "--precision", "fp32",
            "--shards", "2", "--max-new-tokens", "4", "--chat", "off", "--results-table", "generated",
            "--budget-tokens", "800"]  # fmt: skip
    assert main([*argv, "--progress", "none"]) == 1  # its budget stops it: a run to resume
    (stop,) = [line for line in capfd.readouterr().err.splitlines() if line.startswith("stopped: budget: ")]
    ledger = sqlite_url  # results in the source database: the ledger is there too
    ((run_id,),) = execute(ledger, "select run_id from shardwise_runs")
    printed = stop.split("; go on with: ", 1)[1]
    assert printed == f"shardwise run --source {sqlite_url} --resume {run_id} --budget-tokens LARGER", stop

    assert main(["run", "--resume", run_id]) == 2
    err = one_line(capfd)
    assert f"--resume {run_id} finds the run in its ledger" in err and "give --results" in err, err

    assert main(["run", "--results", sqlite_url, "--resume", run_id, "--max-new-tokens", "5"]) == 2
    err = one_line(capfd)
    assert f"--max-new-tokens 5 differs from run {run_id!r}'s 4" in err, err
    assert "drop --max-new-tokens" in err, err
    assert main(["run", "--results", sqlite_url, "--resume", run_id, "--table", "other"]) == 2
    assert f"--table 'other' differs from run {run_id!r}'s 'docs'" in one_line(capfd)
    assert main(["run", "--results", sqlite_url, "--resume", "no-such-run"]) == 2
    assert "run 'no-such-run' is not in the shardwise_runs table of" in one_line(capfd)

    resume = shlex.split(printed.replace("LARGER", "1000000"))[1:]  # as printed, a larger budget given
    # --table agrees with the run's; --workers is one a resume may change
    assert main([*resume, "--table", "docs", "--workers", "1", "--progress", "none"]) == 0
    assert f"run {run_id} completed (resumed)" in capfd.readouterr().out
    ((status,),) = execute(ledger, f"select status from shardwise_runs where run_id = '{run_id}'")
    assert status == "completed"
