"""What a run will cost, before it runs (issue 38): ``shardwise plan`` counts the prompt tokens the run then
counts, bounds the completion tokens, and gives a dollar range that holds the run's real cost."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from flow_data import execute, make_docs
from hf_builders import tiny_causal_lm

from shardwise.cost import Pricing
from shardwise.flows.cli import main
from shardwise.flows.params import ScoreParams
from shardwise.flows.score import score
from shardwise.pipeline.estimate import TokenCount, estimate_cost
from shardwise.tasks.artifacts import plan_figure

pytestmark = [pytest.mark.usefixtures("prefect_harness")]
pytest.importorskip("transformers")

ROWS = 40
NEW = 6
PRICE = 3.6


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"), context=4096)


def _options(url: str, lm: Path, table: str) -> list[str]:
    return [
        "--source", url, "--table", "docs", "--model", str(lm), "--results-table", table, "--precision",
        "fp32", "--shards", "2", "--max-new-tokens", str(NEW), "--chat", "off", "--device-price-per-hour",
        str(PRICE),
    ]  # fmt: skip


def _plan(url: str, lm: Path, table: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["plan", *_options(url, lm, table), "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    return dict(json.loads(line))


def _run(url: str, lm: Path, table: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["run", *_options(url, lm, table), "--progress", "none"]) == 0
    capsys.readouterr()
    assert main(["runs", "--results", url, "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out.splitlines()[0]))  # the newest


def test_the_plan_counts_the_prompt_tokens_the_run_counts_and_its_range_holds_the_real_cost(
    sqlite_url: str, lm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, ROWS)
    before = _plan(sqlite_url, lm, "first", capsys)
    assert before["rows"] == ROWS + 3 and "exact: every one of" in before["prompt_tokens_counted"]
    assert before["device_hours"] is None and before["cost_usd_low"] is None, "no earlier run: unknown"
    assert "device-hours unknown" in before["cost_basis"]

    first = _run(sqlite_url, lm, "first", capsys)
    ((prompt, completion, scored),) = execute(
        sqlite_url, "select sum(prompt_tokens), sum(completion_tokens), count(*) from first"
    )
    assert before["prompt_tokens"] == prompt == first["prompt_tokens"], "exact: the run's own count"
    assert before["max_completion_tokens"] == scored * NEW >= completion

    after = _plan(sqlite_url, lm, "second", capsys)  # the first run's seconds per row are known now
    assert after["prompt_tokens"] == prompt and after["device_hours"] is not None
    low, high = after["cost_usd_low"], after["cost_usd_high"]
    assert low == pytest.approx(after["device_hours_low"] * PRICE)
    second = _run(sqlite_url, lm, "second", capsys)
    assert low <= second["cost_usd"] <= high, (low, second["cost_usd"], high)

    assert main(["plan", *_options(sqlite_url, lm, "third")]) == 0
    out = capsys.readouterr().out
    assert f"prompt tokens: {prompt:,} (exact: every one of {ROWS + 3} rows tokenized); " in out
    assert f"completion tokens: at most {scored * NEW:,}" in out and "cost: $" in out


def test_a_large_table_is_sampled_and_the_plan_says_so(
    sqlite_url: str, lm: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_docs(sqlite_url, ROWS)
    exact = _plan(sqlite_url, lm, "t", capsys)["prompt_tokens"]
    monkeypatch.setattr(importlib.import_module("shardwise.pipeline.estimate"), "EXACT_ROWS", 10)
    monkeypatch.setattr(importlib.import_module("shardwise.pipeline.estimate"), "_SAMPLE_ROWS", 8)
    sampled = _plan(sqlite_url, lm, "t", capsys)
    assert sampled["prompt_tokens_counted"].startswith("estimated from a sample of 16 of 43 rows")
    assert sampled["prompt_tokens"] != exact and sampled["prompt_tokens"] == pytest.approx(exact, rel=0.5)


def test_a_remote_models_range_runs_from_all_cached_and_silent_to_uncached_and_capped() -> None:
    tokens = TokenCount(rows=4, counted_rows=2, per_row=[1000, 3000], max_new_tokens=100, sampled=True)
    found = estimate_cost(tokens, Pricing("openai:gpt-4o-mini"), [])
    # gpt-4o-mini: $0.15 per 1M input tokens, $0.075 cached, $0.60 output; two rows stand for four.
    assert found.cost_usd_low == pytest.approx(2 * 4000 * 0.075 / 1e6)
    assert found.cost_usd_high == pytest.approx(2 * (4000 * 0.15 + 200 * 0.6) / 1e6)
    assert found.device_hours is None
    unknown = estimate_cost(tokens, Pricing("openai:my-local-server-model"), [])
    assert unknown.cost_usd_low is None and "no price known" in unknown.basis


FIGURES = (
    "rows", "prompt_tokens", "prompt_tokens_counted", "max_completion_tokens", "device_hours",
    "device_hours_from", "device_hours_low", "device_hours_high", "cost_usd_low", "cost_usd_high",
    "cost_basis",
)  # fmt: skip


def _dry_run_artifact(url: str, lm: Path, table: str) -> dict[str, str]:
    """A flow run with the UI form's dry-run option for the same spec as :func:`_options`: its
    ``shardwise-plan`` artifact, read back from the Prefect API, as ``{name: shown value}``."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    params = {
        "source": {"location": url, "table": "docs"},
        "model": {"name": str(lm), "generation": {"max_new_tokens": NEW, "chat": "off"}},
        "results": {"table": table},
        "run": {"precision": "fp32", "shards": 2, "device_price_per_hour": PRICE, "dry_run": True},
    }
    state = score(ScoreParams.model_validate(params), return_state=True)
    assert state.is_completed(), state

    async def read() -> str:
        async with get_client() as client:
            (found,) = await client.read_artifacts(
                artifact_filter=ArtifactFilter(
                    flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id]),
                    key=ArtifactFilterKey(any_=["shardwise-plan"]),
                )
            )
            return str(found.data)

    shown: dict[str, str] = {}
    for line in asyncio.run(read()).splitlines()[4:]:  # after the title and the table's header
        name, value = (cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:3])
        code = value.startswith("`")  # a code span escapes only its pipes; text, its punctuation
        value = value[1:-1].replace("\\|", "|") if code else re.sub(r"\\(.)", r"\1", value)
        shown[re.sub(r"\\(.)", r"\1", name)] = value
    return shown


def _shown(name: str, value: Any) -> str:
    """How the artifact shows a figure of ``plan --json``: as ``shardwise plan`` prints it."""
    if value is None:
        return "unknown"
    return value if isinstance(value, str) else plan_figure(name, value)


def test_the_ui_dry_runs_artifact_shows_the_figures_of_shardwise_plan_json(
    sqlite_url: str, lm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, ROWS)
    for table in ("before", "after"):  # device-hours and dollars unknown, then from the run between
        shown, plan = _dry_run_artifact(sqlite_url, lm, table), _plan(sqlite_url, lm, table, capsys)
        assert {name: shown[name] for name in FIGURES} == {name: _shown(name, plan[name]) for name in FIGURES}
        assert not any(re.fullmatch(r"\d+\.\d{5,}", shown[name]) for name in FIGURES), "no raw floats"
        if table == "before":
            assert shown["device_hours"] == shown["cost_usd_low"] == "unknown"
            _run(sqlite_url, lm, "first", capsys)
    assert shown["cost_usd_high"].startswith("$") and shown["cost_usd_low"].startswith("$")
    assert int(shown["prompt_tokens"].replace(",", "")) > 0
    assert int(shown["max_completion_tokens"].replace(",", "")) % NEW == 0


def test_with_no_earlier_run_the_device_hours_come_from_a_cached_calibration_pass(
    sqlite_url: str, tmp_path: Path, lm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bf16 run elsewhere (another database, so another ledger) runs the precision guard, which times
    the calibration batch in fp32 and bf16 and caches it on this host; the plan of an fp32 run with no
    earlier run in its ledger takes fp32's speed, and says so; once a run is recorded, that wins."""
    make_docs(sqlite_url, ROWS)
    first = _plan(sqlite_url, lm, "t", capsys)
    assert first["device_hours"] is None and first["device_hours_from"].startswith("unknown: no earlier run")

    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    make_docs(elsewhere, ROWS)
    options = [*_options(elsewhere, lm, "guarded"), "--precision", "bf16", "--min-agreement", "0.01"]
    assert main(["run", *options, "--progress", "none"]) == 0
    capsys.readouterr()
    stored = json.loads((Path(os.environ["SHARDWISE_HOME"]) / "calibration.json").read_text())
    (speed,) = [
        e["cost_per_s"]
        for e in stored["entries"].values()
        if e["key"]["model"] == f"hf:{lm}" and e["key"]["precision"] == "fp32" and "cost_per_s" in e
    ]

    plan = _plan(sqlite_url, lm, "t", capsys)
    day = datetime.now(timezone.utc).date().isoformat()
    assert plan["device_hours_from"] == f"a calibration pass on {day}", plan["cost_basis"]
    hours = (plan["prompt_tokens"] + plan["max_completion_tokens"]) / speed / 3600  # its compute time
    low, high = plan["device_hours_low"], plan["device_hours_high"]
    assert plan["device_hours"] == pytest.approx(hours)
    assert (low, high) == (pytest.approx(hours / 2), pytest.approx(4 * hours))
    assert (plan["cost_usd_low"], plan["cost_usd_high"]) == (
        pytest.approx(low * PRICE),
        pytest.approx(high * PRICE),
    )
    ran = _run(sqlite_url, lm, "t", capsys)
    assert _plan(sqlite_url, lm, "u", capsys)["device_hours_from"] == "1 earlier run", "a run wins"
    print(f"calibrated device-hours {low:.3g} to {high:.3g}; the run's {ran['device_seconds'] / 3600:.3g}")
