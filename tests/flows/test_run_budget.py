"""A run's dollar budget (issue 38): ``--budget-usd`` stops its shards at a chunk boundary before the cost
would pass it, with everything committed kept, and ``--resume`` with a larger budget finishes it exactly."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
from flow_data import BAD_ROWS, execute, make_docs
from hf_builders import tiny_causal_lm

from shardwise.flows.cli import main
from shardwise.flows.prices import DEVICE_PRICE_ENV

pytestmark = [pytest.mark.usefixtures("prefect_harness")]
pytest.importorskip("transformers")

ROWS = 40
PRICE = 36.0
ROW = "select source_key, generated_text, prompt_tokens, completion_tokens from {} order by source_key"


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"), context=4096)


@pytest.fixture(autouse=True)
def chunks_of_4(monkeypatch: pytest.MonkeyPatch) -> None:
    worker = importlib.import_module("shardwise.pipeline.worker")
    chunks = importlib.import_module("shardwise.pipeline.chunks")
    monkeypatch.setattr(worker, "ChunkConfig", lambda rows: chunks.ChunkConfig(4))
    monkeypatch.delenv(DEVICE_PRICE_ENV, raising=False)


def _run(url: str, lm: Path, table: str, *extra: str) -> list[str]:
    return [
        "run", "--source", url, "--table", "docs", "--model", str(lm), "--results-table", table,
        "--precision", "fp32", "--shards", "2", "--progress", "none", "--max-new-tokens", "6",
        "--chat", "off", "--device-price-per-hour", str(PRICE), *extra,
    ]  # fmt: skip


def _cost(url: str, capsys: pytest.CaptureFixture[str]) -> float:
    assert main(["runs", "--results", url, "--json"]) == 0
    return float(json.loads(capsys.readouterr().out.splitlines()[0])["cost_usd"])


def test_half_the_budget_stops_at_a_chunk_boundary_and_a_resume_with_more_finishes_exactly(
    sqlite_url: str, lm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, ROWS)
    assert main(_run(sqlite_url, lm, "reference")) == 0
    capsys.readouterr()
    full = _cost(sqlite_url, capsys)
    budget = full / 2

    assert main(_run(sqlite_url, lm, "budgeted", "--budget-usd", f"{budget:.8f}")) == 1
    out, err = capsys.readouterr()
    (run_id,) = [
        r
        for (r,) in execute(sqlite_url, "select run_id from shardwise_runs where results_table = 'budgeted'")
    ]
    assert f"run {run_id} stopped: budget: " in out, out
    (line,) = [x for x in err.splitlines() if x.startswith("stopped: budget: ")]
    spent = re.match(r"stopped: budget: \$([\d.]+) spent of the \$([\d.]+) budget", line)
    assert spent and f"--resume {run_id} --budget-usd LARGER" in line, line
    ((status,),) = execute(sqlite_url, f"select status from shardwise_runs where run_id = '{run_id}'")
    assert status == "failed", "the ledger keeps it resumable"
    ((kept,),) = execute(sqlite_url, "select count(*) from budgeted")
    ((marked,),) = execute(
        sqlite_url, f"select sum(rows_out) from shardwise_chunks where run_id = '{run_id}'"
    )
    assert 0 < kept == marked < ROWS, "stopped at a chunk boundary: every committed row kept, no more"
    costs = [
        c
        for (c,) in execute(
            sqlite_url,
            "select u.cost_usd from shardwise_chunk_usage u join shardwise_chunks c "
            f"using (run_id, shard_id, chunk) where run_id = '{run_id}' order by c.committed_at",
        )
    ]
    assert _cost(sqlite_url, capsys) == pytest.approx(sum(costs)) == pytest.approx(float(spent[1]), rel=1e-3)
    assert sum(costs[:-1]) <= budget, "every chunk but the last committed was within the budget"
    with capsys.disabled():
        print(
            f"\nbudget ${budget:.6f} of a full run's ${full:.6f}: stopped after {len(costs)} chunks, {costs}"
        )
    kept_rows = execute(sqlite_url, ROW.format("budgeted"))
    assert set(kept_rows) <= set(execute(sqlite_url, ROW.format("reference"))), "the rows a full run scores"

    assert main(_run(sqlite_url, lm, "budgeted", "--resume", run_id, "--budget-usd", f"{full * 10:.8f}")) == 0
    out = capsys.readouterr().out
    assert f"run {run_id} completed (resumed)" in out, out
    assert execute(sqlite_url, ROW.format("budgeted")) == execute(sqlite_url, ROW.format("reference"))
    ((rows, failed),) = execute(
        sqlite_url, f"select sum(rows_out), sum(rows_failed) from shardwise_chunks where run_id = '{run_id}'"
    )
    assert (rows, failed) == (ROWS, len(BAD_ROWS)), "each row scored and committed once, across the stop"


def test_a_budget_without_a_price_is_refused_before_anything_runs(
    sqlite_url: str, lm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 4)
    argv = [
        a
        for a in _run(sqlite_url, lm, "t", "--budget-usd", "1")
        if a not in ("--device-price-per-hour", str(PRICE))
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--budget-usd 1 needs the run priced" in err, err
    assert main([*_run(sqlite_url, lm, "t"), "--budget-usd", "0"]) == 2
    assert "--budget-usd" in capsys.readouterr().err
