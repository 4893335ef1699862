"""A run's dollar budget (issue 38): ``--budget-usd`` stops its shards at a chunk boundary before the cost
would pass it, with everything committed kept, and ``--resume`` with a larger budget finishes it exactly."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
from flow_data import BAD_ROWS, execute, make_docs
from hf_builders import tiny_causal_lm, tiny_encoder

from shardwise.flows.cli import main
from shardwise.flows.prices import DEVICE_PRICE_ENV

pytestmark = [pytest.mark.usefixtures("prefect_harness")]
pytest.importorskip("transformers")

ROWS = 40
DOLLAR_ROWS = 150
PRICE = 36.0
ROW = "select source_key, generated_text, prompt_tokens, completion_tokens from {} order by source_key"


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"), context=4096)


@pytest.fixture(autouse=True)
def chunks_of_4(monkeypatch: pytest.MonkeyPatch) -> None:
    worker = importlib.import_module("shardwise.pipeline.worker")
    chunks = importlib.import_module("shardwise.pipeline.chunks")
    # At most 4 rows: a budgeted run's own chunk (see test_budget_first_chunk.py) may be smaller.
    monkeypatch.setattr(worker, "ChunkConfig", lambda rows: chunks.ChunkConfig(min(rows, 4)))
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


def test_a_dollar_budget_stops_at_a_chunk_boundary_and_a_resume_with_more_finishes_exactly(
    sqlite_url: str, lm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, DOLLAR_ROWS)
    assert main(_run(sqlite_url, lm, "reference")) == 0
    capsys.readouterr()
    full = _cost(sqlite_url, capsys)
    # A local model's cost is its chunks' device time, which on a loaded 2-core host swings: one run's
    # whole cost was $0.003, and one chunk of the same rows in the next run $0.016. A budget's chunk holds
    # at most a tenth of it at the plan's high estimate (twice the reference's slowest seconds per row):
    # over this many rows a fifth of the reference's cost sizes chunks of a row or two, and stops the
    # run unless it scores five times faster than the reference. The token budget's test, exact, takes half.
    budget = full / 5
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
    assert 0 < kept == marked < DOLLAR_ROWS, "stopped at a chunk boundary: every committed row kept, no more"
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

    larger = f"{full * 1000:.8f}"
    assert main(_run(sqlite_url, lm, "budgeted", "--resume", run_id, "--budget-usd", larger)) == 0
    out = capsys.readouterr().out
    assert f"run {run_id} completed (resumed)" in out, out
    assert execute(sqlite_url, ROW.format("budgeted")) == execute(sqlite_url, ROW.format("reference"))
    ((rows, failed),) = execute(
        sqlite_url, f"select sum(rows_out), sum(rows_failed) from shardwise_chunks where run_id = '{run_id}'"
    )
    assert (rows, failed) == (DOLLAR_ROWS, len(BAD_ROWS)), (
        "each row scored and committed once, across the stop"
    )


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


def _tokens(url: str, run_id: str) -> list[int]:
    """Each committed chunk's tokens (prompt plus completion), as its mark records them, in commit order."""
    found = execute(
        url, f"select counts from shardwise_chunks where run_id = '{run_id}' order by committed_at, shard_id"
    )
    return [
        (c := json.loads(v) if isinstance(v, str) else v)["prompt_tokens"] + c["completion_tokens"]
        for (v,) in found
    ]


def _run_id(url: str, table: str) -> str:
    ((run_id,),) = execute(url, f"select run_id from shardwise_runs where results_table = '{table}'")
    return str(run_id)


@pytest.mark.parametrize("database", ["sqlite_url", pytest.param("pg_url", marks=pytest.mark.postgres)])
def test_two_workers_share_a_token_budget_within_one_chunks_estimate_and_a_resume_finishes_exactly(
    database: str, lm: Path, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    url = str(request.getfixturevalue(database))
    # Rows of one length, so that a chunk's tokens are close to the committed chunks' average.
    execute(url, "create table docs (id bigint primary key, text text)")
    rows = [{"id": i, "text": f"row {i:03d} of the table that the budget reads"} for i in range(ROWS)]
    execute(url, "insert into docs (id, text) values (:id, :text)", rows)
    # Two worker threads, each with its own ledger connection: the chunk size (4 rows, patched above)
    # stays in this process, and the holds are shared through the database as between processes.
    two = ("--workers", "2")
    unpriced = [
        a for a in _run(url, lm, "reference", *two) if a not in ("--device-price-per-hour", str(PRICE))
    ]
    assert main(unpriced) == 0
    capsys.readouterr()
    full = sum(_tokens(url, _run_id(url, "reference")))
    budget = full // 2

    argv = [a if a != "reference" else "budgeted" for a in unpriced]
    assert main([*argv, "--budget-tokens", str(budget)]) == 1, "a token budget needs no price"
    out, err = capsys.readouterr()
    run_id = _run_id(url, "budgeted")
    assert f"run {run_id} stopped: budget: " in out, out
    (line,) = [x for x in err.splitlines() if x.startswith("stopped: budget: ")]
    said = re.match(r"stopped: budget: ([\d,]+) tokens spent of the ([\d,]+)-token budget", line)
    assert said and said[2].replace(",", "") == str(budget), line
    assert line.endswith(f"--resume {run_id} --budget-tokens LARGER"), line
    chunks = _tokens(url, run_id)
    spent = sum(chunks)
    assert int(said[1].replace(",", "")) == spent
    ((kept,),) = execute(url, "select count(*) from budgeted")
    ((marked,),) = execute(url, f"select sum(rows_out) from shardwise_chunks where run_id = '{run_id}'")
    assert 0 < kept == marked < ROWS, "stopped at chunk boundaries, every committed row kept"
    # Each chunk was held at the committed chunks' average before it was scored, beside the other worker's:
    # the run passes its budget by no more than what its chunks in flight used beyond that average.
    error = max(chunks) - min(chunks)
    assert spent <= budget + 2 * error, (spent, budget, chunks)
    assert 2 * error < min(chunks), "so it never passes the budget by a whole chunk"
    with capsys.disabled():
        print(
            f"\ntoken budget {budget} of a full run's {full}: {len(chunks)} chunks, {spent} tokens, {chunks}"
        )

    assert main([*argv, "--resume", run_id, "--budget-tokens", str(full * 10)]) == 0
    assert f"run {run_id} completed (resumed)" in capsys.readouterr().out
    assert execute(url, ROW.format("budgeted")) == execute(url, ROW.format("reference"))
    assert sum(_tokens(url, run_id)) == full, "each row's tokens counted once, across the stop"


@pytest.mark.parametrize("bad", ["0", "-3", "1.5", "lots"])
def test_a_bad_token_budget_is_refused_in_one_line_before_anything_runs(
    sqlite_url: str, lm: Path, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    make_docs(sqlite_url, 4)
    try:
        code = main([*_run(sqlite_url, lm, "t"), f"--budget-tokens={bad}"])
    except SystemExit as exc:  # the parser's own type check (an integer) exits at once
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--budget-tokens" in err and bad in err, err
    assert not execute(sqlite_url, "select name from sqlite_master where name = 'shardwise_runs'")


def test_a_token_budget_on_a_model_that_counts_no_tokens_is_refused(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 4)
    encoder = tiny_encoder(tmp_path / "enc")
    argv = [
        "run", "--source", sqlite_url, "--table", "docs", "--model", str(encoder), "--results-table", "t",
        "--progress", "none", "--budget-tokens", "1000",
    ]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert (
        "--budget-tokens 1000 needs a model that counts its tokens" in err and "drop --budget-tokens" in err
    )
    assert not execute(sqlite_url, "select 1 from sqlite_master where name = 'shardwise_runs'")


def test_both_budgets_at_once_stop_at_the_first_reached_and_the_line_names_both(
    sqlite_url: str, lm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, ROWS)
    assert main(_run(sqlite_url, lm, "reference")) == 0  # its seconds per row price a chunk's dollars
    capsys.readouterr()
    full = sum(_tokens(sqlite_url, _run_id(sqlite_url, "reference")))
    tokens = full // 2
    assert main(_run(sqlite_url, lm, "t", "--budget-usd", "1000", "--budget-tokens", str(tokens))) == 1
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("stopped: budget: ")]
    run_id = _run_id(sqlite_url, "t")
    spent = sum(_tokens(sqlite_url, run_id))
    assert (
        f" spent of the $1,000.00 budget and {spent:,} tokens spent of the {tokens:,}-token budget (" in line
    )
    assert line.endswith(f"--resume {run_id} --budget-usd LARGER --budget-tokens LARGER"), line
    assert 0 < spent < full, "the tokens stopped it (past them by no more than the estimates' error)"
