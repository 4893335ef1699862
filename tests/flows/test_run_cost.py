"""What a run costs (issue 38), after it ran: tokens, device time and dollars, recorded per chunk in the
ledger and shown the same by the summary line, the run's artifact, its event and ``shardwise runs``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flow_data import BAD_ROWS, execute, make_docs
from hf_builders import tiny_causal_lm

from shardwise.cost.usage import dollars
from shardwise.flows.cli import main
from shardwise.flows.prices import DEVICE_PRICE_ENV
from shardwise.tasks.markdown import text

pytestmark = [pytest.mark.usefixtures("prefect_harness")]
pytest.importorskip("transformers")

ROWS = 20
TABLE = "generated"
PRICE = 3.6  # dollars per device-hour: a chunk's dollars are its device seconds / 1000


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"), context=4096)


def _run(url: str, lm: Path, *extra: str) -> list[str]:
    return [
        "run", "--source", url, "--table", "docs", "--model", str(lm), "--results-table", TABLE,
        "--precision", "fp32", "--shards", "2", "--progress", "none", "--max-new-tokens", "6",
        "--chat", "off", *extra,
    ]  # fmt: skip


def _markdown(run_id: str) -> str:
    import asyncio

    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async def read() -> str:
        async with get_client() as client:
            found = await client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]))
            )
            return str(next(a.data for a in found if a.key == "shardwise-run"))

    return asyncio.run(read())


def _runs_json(url: str, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    assert main(["runs", "--results", url, "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.usefixtures("chunks_of_4")
@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_priced_generation_run_shows_the_same_dollars_everywhere(
    database: str, lm: Path, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    url = str(request.getfixturevalue("sqlite_url" if database == "sqlite" else "pg_url"))
    make_docs(url, ROWS)
    code = main(_run(url, lm, "--device-price-per-hour", str(PRICE)))
    out, err = capsys.readouterr()
    assert code == 0, out + err

    ((run_id,),) = execute(url, "select run_id from shardwise_runs")
    chunks = execute(
        url,
        "select c.rows_in, u.device, u.device_s, u.cost_usd from shardwise_chunks c join "
        "shardwise_chunk_usage u using (run_id, shard_id, chunk) order by c.shard_id, c.chunk",
    )
    ((marks,),) = execute(url, "select count(*) from shardwise_chunks")
    assert len(chunks) == marks > 2, "every chunk records its usage with its mark"
    assert sum(rows for rows, *_ in chunks) == ROWS + len(BAD_ROWS)
    for _, device, seconds, cost in chunks:
        assert device == "cpu" and seconds > 0
        assert cost == pytest.approx(seconds * PRICE / 3600)
    cost = sum(c for *_, c in chunks)
    seconds = sum(s for _, _, s, _ in chunks)
    ((completion, prompt, scored),) = [
        tuple(map(int, row))
        for row in execute(url, f"select sum(completion_tokens), sum(prompt_tokens), count(*) from {TABLE}")
    ]

    summary = next(line for line in out.splitlines() if line.startswith("cost "))
    per_1k = dollars(cost * 1000 / (ROWS + len(BAD_ROWS)))
    per_1m = dollars(cost * 1e6 / (prompt + completion))
    assert summary.startswith(f"cost {dollars(cost)} ({per_1k}/1k rows, {per_1m}/1M tokens), "), summary
    assert f"{seconds / 3600:.4f} device-hours (cpu " in summary

    markdown = _markdown(run_id)
    assert f"| Cost | {text(dollars(cost))} |" in markdown
    assert f"| Cost per 1k rows | {text(per_1k)} |" in markdown
    assert f"| Device-hours | {seconds / 3600:.4f}" in markdown

    (listed,) = _runs_json(url, capsys)
    assert listed["run_id"] == run_id and listed["status"] == "completed"
    assert listed["rows"] == ROWS + len(BAD_ROWS) and listed["rows_scored"] == scored == ROWS
    assert (listed["prompt_tokens"], listed["completion_tokens"]) == (prompt, completion)
    assert listed["cost_usd"] == pytest.approx(cost) and listed["device_seconds"] == pytest.approx(
        seconds, abs=1e-3
    )
    assert main(["runs", "--results", url]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[-3:] == ["TOKENS", "DEVICE-H", "COST"]
    assert table[1].split()[-3:] == [f"{prompt + completion:,}", f"{seconds / 3600:.4f}", dollars(cost)]


def test_the_price_comes_from_the_environment_and_without_one_only_device_hours_show(
    sqlite_url: str, lm: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_docs(sqlite_url, 6, bad=False)
    monkeypatch.delenv(DEVICE_PRICE_ENV, raising=False)
    assert main(_run(sqlite_url, lm)) == 0
    out = capsys.readouterr().out
    assert "cost unknown (no price set), " in out and "device-hours (cpu " in out
    (unpriced,) = _runs_json(sqlite_url, capsys)
    assert unpriced["cost_usd"] is None and unpriced["device_seconds"] > 0
    assert unpriced["cost_usd_per_1k_rows"] is None

    monkeypatch.setenv(DEVICE_PRICE_ENV, "7.2")
    assert main([*_run(sqlite_url, lm), "--results-table", "other"]) == 0
    capsys.readouterr()
    priced, _ = _runs_json(sqlite_url, capsys)  # newest first
    assert priced["cost_usd"] == pytest.approx(priced["device_seconds"] * 7.2 / 3600, rel=1e-6)

    monkeypatch.setenv(DEVICE_PRICE_ENV, "two dollars")
    assert main(_run(sqlite_url, lm)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{DEVICE_PRICE_ENV}='two dollars' is not a price" in err, err
    assert main([*_run(sqlite_url, lm), "--device-price-per-hour", "-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--device-price-per-hour" in err, err
