"""A remote model's run is priced by its tokens at the price table's prices (issue 38), end to end: a real
``vllm serve`` on loopback answers as ``gpt-4o-mini``, and the run's cost is its rows' usage at
gpt-4o-mini's published prices ($0.15 per 1M input tokens, $0.075 cached, $0.60 output)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from endpoint_servers import API_KEY, KEY_REFERENCE, require_vllm, tiny_llama, vllm_server

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("vllm-serve")]  # one vllm serve at a time

PRICED = "gpt-4o-mini"


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory):
    require_vllm()
    root = tmp_path_factory.mktemp("endpoint-cost")
    # The last --served-model-name wins: the server answers as a model the price table knows.
    with vllm_server(tiny_llama(root / "lm"), root / "vllm.log", "--served-model-name", PRICED) as url:
        yield url, root / "lm"


def test_a_remote_models_run_costs_its_rows_tokens_at_the_tables_prices(
    origin: tuple[str, Path], tmp_path, prefect_harness: None, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from flow_data import execute, make_docs

    from shardwise.flows.cli import main

    monkeypatch.setenv(KEY_REFERENCE.removeprefix("env:"), API_KEY)
    url = f"sqlite:///{tmp_path / 'docs.db'}"
    make_docs(url, 30)
    options = [
        "--source", url, "--table", "docs", "--model", f"openai:{PRICED}", "--api-base", f"{origin[0]}/v1",
        "--api-key", KEY_REFERENCE, "--results-table", "priced", "--shards", "2", "--max-new-tokens", "8",
    ]  # fmt: skip
    assert main(["plan", *options, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out.splitlines()[-1])
    # No tokenizer here (it is the server's): the plan estimates the prompt tokens, says by which rule,
    # and prices its range from that estimate.
    assert plan["prompt_tokens_counted"].startswith("estimated (no tokenizer: 4 characters a token")
    estimate, cap = plan["prompt_tokens"], plan["max_completion_tokens"]
    assert estimate > 0 and "genai-prices' token prices" in plan["cost_basis"]
    assert "an estimate, not a bound" in plan["cost_basis"]
    assert plan["cost_usd_low"] == pytest.approx(estimate * 0.075 / 1e6)
    assert plan["cost_usd_high"] == pytest.approx((estimate * 0.15 + cap * 0.6) / 1e6)
    # With the served model's tokenizer named, the plan counts as the server will.
    assert main(["plan", *options, "--tokenizer", str(origin[1]), "--json"]) == 0
    given = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert given["prompt_tokens_counted"].startswith(f"estimated (the tokenizer at {origin[1]}, which")
    assert main(["plan", *options, "--tokenizer", str(tmp_path), "--json"]) == 2
    (refusal,) = capsys.readouterr().err.strip().splitlines()
    assert f"tokenizer {str(tmp_path)!r} holds no tokenizer" in refusal and "drop --tokenizer" in refusal

    assert main(["run", *options, "--progress", "none"]) == 0
    out = capsys.readouterr().out
    rows = execute(url, "select prompt_tokens, cached_tokens, completion_tokens from priced")
    assert rows and all(p > 0 for p, _, _ in rows)
    expected = sum((p - c) * 0.15 + c * 0.075 + o * 0.6 for p, c, o in rows) / 1e6
    assert main(["runs", "--results", url, "--json"]) == 0
    (listed,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert listed["cost_usd"] == pytest.approx(expected)
    assert listed["prompt_tokens"] == sum(p for p, _, _ in rows) == given["prompt_tokens"]
    assert cap == 8 * len(rows) >= sum(o for _, _, o in rows)
    print(f"prompt tokens: estimated {estimate}, counted by the server {listed['prompt_tokens']}")
    assert any(line.startswith("cost $") for line in out.splitlines()), out
