"""A budget holds from the first chunk (issue 45, item 4): a budgeted run's chunks are sized from the plan's
estimate so that one, the first included, spends at most a tenth of the budget; a budget the plan cannot
size a chunk for is refused before anything runs; ``shardwise plan`` says whether a budget covers the
estimate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import ledger_runs, one_line
from flow_data import execute
from hf_builders import tiny_causal_lm

from shardwise.flows.cli import main
from shardwise.flows.prices import DEVICE_PRICE_ENV
from shardwise.words import plural

pytestmark = [pytest.mark.usefixtures("prefect_harness")]
pytest.importorskip("transformers")

ROWS = 30
NEW = 6


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"), context=4096)


@pytest.fixture(autouse=True)
def no_price_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEVICE_PRICE_ENV, raising=False)


def _options(url: str, lm: Path, table: str, *extra: str) -> list[str]:
    return [
        "--source", url, "--table", "docs", "--model", str(lm), "--results-table", table, "--precision",
        "fp32", "--shards", "2", "--max-new-tokens", str(NEW), "--chat", "off", *extra,
    ]  # fmt: skip


def _plan(url: str, lm: Path, *extra: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["plan", *_options(url, lm, "t", *extra), "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    return dict(json.loads(line))


def _chunk_tokens(url: str, run_id: str) -> list[tuple[int, int]]:
    """Each committed chunk's (rows, prompt plus completion tokens), in commit order."""
    found = execute(
        url,
        f"select rows_out + rows_failed, counts from shardwise_chunks where run_id = '{run_id}' "
        "order by committed_at, shard_id",
    )
    return [
        (rows, (c := json.loads(v) if isinstance(v, str) else v)["prompt_tokens"] + c["completion_tokens"])
        for rows, v in found
    ]


def test_a_token_budget_holds_from_the_first_chunk_and_the_plan_says_what_it_covers(
    sqlite_url: str, lm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Rows of one length, so that every row's prompt has the planned rows' average tokens.
    execute(sqlite_url, "create table docs (id bigint primary key, text text)")
    rows = [{"id": i, "text": f"row {i:03d} of the table that the budget reads"} for i in range(ROWS)]
    execute(sqlite_url, "insert into docs (id, text) values (:id, :text)", rows)
    plan = _plan(sqlite_url, lm, capsys=capsys)
    high = plan["prompt_tokens"] + plan["max_completion_tokens"]
    budget = high // 2
    assert plan["prompt_tokens"] > budget, "less than the prompts alone: the run stops"
    budgeted = _plan(sqlite_url, lm, "--budget-tokens", str(budget), capsys=capsys)
    assert budgeted["budget_tokens"] == budget
    assert budgeted["budget_tokens_covers"] == "no"
    size = budgeted["budget_chunk_rows"]
    assert 1 <= size < ROWS / 2, "a chunk is a share of the run, not a whole shard"
    assert main(["plan", *_options(sqlite_url, lm, "t", "--budget-tokens", str(budget))]) == 0
    said = capsys.readouterr().out
    assert (
        f"budget {budget:,} tokens " in said
        and f"chunks of {plural(size, 'row')}, each at most a tenth" in said
    )
    covered = _plan(sqlite_url, lm, "--budget-tokens", str(high), capsys=capsys)
    assert covered["budget_tokens_covers"] == "yes"

    argv = [
        "run",
        *_options(sqlite_url, lm, "budgeted", "--budget-tokens", str(budget)),
        "--progress",
        "none",
    ]
    assert main(argv) == 1
    capsys.readouterr()
    ((run_id,),) = execute(sqlite_url, "select run_id from shardwise_runs")
    chunks = _chunk_tokens(sqlite_url, run_id)
    assert chunks, "the run committed its first chunks before it stopped"
    assert all(n <= size for n, _ in chunks), chunks
    assert all(tokens <= budget / 10 for _, tokens in chunks), (
        "every chunk, the first one scored alone included, used at most a tenth of the budget",
        budget,
        chunks,
    )
    spent = sum(t for _, t in chunks)
    assert spent <= budget
    # Stopped within its budget: `runs` lists it stopped, and not past its budget.
    listed = _runs(sqlite_url, capsys)
    assert listed["status"] == "stopped" and listed["past_budget"] is None, listed

    # A resume under a budget smaller than what the run spent ends past it, and says so.
    smaller = spent - 1
    resumed = [a if a != str(budget) else str(smaller) for a in argv] + ["--resume", run_id]
    assert main(resumed) == 1
    out = capsys.readouterr().out
    assert (
        f"run {run_id} ended past its budget: {spent:,} tokens spent of the {smaller:,}-token budget" in out
    )
    assert "past its budget" not in out.split(f"run {run_id} ended")[0], "said once, in its own line"
    # `runs` and `runs --json` say so too: the budget this (last) invocation ran under is in the ledger.
    past = f"past its budget: {spent:,} tokens spent of the {smaller:,}-token budget"
    assert _runs(sqlite_url, capsys)["past_budget"] == past
    assert main(["runs", "--results", sqlite_url]) == 0
    table = capsys.readouterr().out
    assert "(past budget)" in table.splitlines()[1], table
    assert f"run {run_id} ended {past}" in table.splitlines(), table


def _runs(url: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The one run ``shardwise runs --json`` lists."""
    assert main(["runs", "--results", url, "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    return dict(json.loads(line))


def test_a_dollar_budget_the_plan_cannot_size_a_first_chunk_for_is_refused_before_anything_runs(
    docs: str, lm: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    sqlite_url = docs  # its ledger is there, empty
    priced = ("--device-price-per-hour", "36")
    # No earlier run of the model in this ledger and no calibration pass: what a row costs is unknown.
    argv = ["run", *_options(sqlite_url, lm, "t", *priced, "--budget-usd", "0.01"), "--progress", "none"]
    assert main(argv) == 2
    line = one_line(capfd)
    assert line.startswith("shardwise: error: --budget-usd 0.01 needs what a row costs, to size the first"), (
        line
    )
    assert "no earlier run of this model in this ledger" in line and "--budget-tokens" in line, line
    assert ledger_runs(sqlite_url) == 0, "nothing recorded"
    assert main(["plan", *_options(sqlite_url, lm, "t", *priced, "--budget-usd", "0.01")]) == 2
    assert one_line(capfd) == line, "the plan refuses what the run would"


def test_a_budget_one_row_alone_would_pass_a_tenth_of_is_refused_naming_the_least_that_holds(
    docs: str, lm: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    sqlite_url = docs  # its ledger is there, empty
    argv = ["run", *_options(sqlite_url, lm, "t", "--budget-tokens", "20"), "--progress", "none"]
    assert main(argv) == 2
    line = one_line(capfd)
    refused = "--budget-tokens 20 cannot hold even one row to a tenth of it: a row may cost up to "
    assert line.startswith(f"shardwise: error: {refused}"), line
    least = int(line.rsplit("give --budget-tokens ", 1)[1].split()[0])
    assert least > 200 and line.endswith(f"give --budget-tokens {least} or more"), line
    assert ledger_runs(sqlite_url) == 0, "nothing recorded"
