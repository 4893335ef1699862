"""Causal LM directories as generators: greedy agreement with ``generate``, stops, versions, sampling.

The model is a tiny random Llama with a BPE tokenizer trained in the test
(``tests/hf_builders.py``). Its end-of-sequence ids are set to tokens it
really produces, so rows stop at different steps (one at its first token),
and batches of very different prompt lengths are left-padded together.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from hf_builders import CHAT_TEMPLATE, set_eos, tiny_causal_lm
from spec_builder import flat_spec

from shardwise import ConfigError, Engine, EngineConfig
from shardwise.corpus import harvest_docstrings
from shardwise.errors import InputError
from shardwise.model.generation import GenerationSettings, with_generation
from shardwise.models.hf.causal.model import HFCausalSpec, HFGenerator

pytest.importorskip("transformers")

CPU = torch.device("cpu")
NEW = 20


def _prompts(n: int = 30) -> list[str]:
    texts = harvest_docstrings(n)
    return [text[: 10 + 37 * i % 300] for i, text in enumerate(texts)]


def _reference(root: Path, texts: Sequence[str], new: int = NEW) -> list[list[int]]:
    """Each text's completion ids from an unbatched ``generate(do_sample=False)``, up to its first EOS."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(root, local_files_only=True)
    net = AutoModelForCausalLM.from_pretrained(root, local_files_only=True).eval()
    eos = set(net.generation_config.eos_token_id)
    out = []
    with torch.inference_mode():
        for text in texts:
            inputs = tokenizer(text, return_tensors="pt")
            prompt = inputs["input_ids"].shape[1]
            ids = net.generate(**inputs, do_sample=False, max_new_tokens=new)[0, prompt:]
            completion = ids.tolist()
            stop = next((i for i, t in enumerate(completion) if t in eos), None)
            out.append(completion if stop is None else completion[: stop + 1])
    return out


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny LM, its EOS set to the first token it writes after the first prompt (so that row
    stops at once) and the EOS it was built with."""
    root = tiny_causal_lm(tmp_path_factory.mktemp("lm"), chat_template=CHAT_TEMPLATE)
    set_eos(root, [1])
    first = _reference(root, _prompts(1))[0][0]
    set_eos(root, [1, first])
    return root


def _score(spec: HFCausalSpec, texts: Sequence[str], max_tokens: int = 400) -> list[dict[str, Any]]:
    engine = Engine(spec.load(CPU), EngineConfig(max_tokens=max_tokens, precision="fp32"))
    results = list(engine.run(enumerate(texts)))
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    return [dict(r.values or {}) for r in results]


def test_greedy_batches_equal_unbatched_generate(lm: Path) -> None:
    texts = _prompts()
    spec = HFCausalSpec(lm, generation=GenerationSettings(chat="off", max_new_tokens=NEW))
    got = _score(spec, texts)
    tokenizer = spec.load(CPU)._tokenizer
    eos = {1, *_reference(lm, texts[:1])[0][:1]}
    for row, ids in zip(got, _reference(lm, texts), strict=True):
        text_ids = [t for t in ids if t not in eos]
        expected = tokenizer.decode(text_ids, skip_special_tokens=True).replace("\x00", "")  # NUL stripped
        assert row["generated_text"] == expected
        assert row["completion_tokens"] == len(text_ids)
        assert row["finish_reason"] == ("stop" if len(text_ids) < len(ids) else "length")
        assert row["prompt_tokens"] == len(tokenizer(texts[got.index(row)])["input_ids"])
    reasons = [row["finish_reason"] for row in got]
    assert got[0]["generated_text"] == "" and got[0]["finish_reason"] == "stop"
    assert "length" in reasons and reasons.count("stop") > 1


def _passes(model: HFGenerator, texts: Sequence[str]) -> tuple[dict[str, Any], list[tuple[int, int]]]:
    """One batch of ``texts`` decoded by ``model``: its columns, and each forward pass's rows and
    width (a prompts' pass is wider than one token, a decoding pass is one)."""
    shapes: list[tuple[int, int]] = []
    hook = model._net.register_forward_pre_hook(
        lambda _net, _args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        batch = model.collate([model.prepare(t) for t in texts])
        with torch.inference_mode():
            outputs = model.to_columns(model.run(batch))
    finally:
        hook.remove()
    return dict(outputs), shapes


def test_finished_rows_leave_the_batch(lm: Path) -> None:
    """A row that stops leaves at once: every pass after computes fewer rows (the outputs are the
    greedy agreement test's, which runs the same batches)."""
    model = HFCausalSpec(lm, generation=GenerationSettings(chat="off", max_new_tokens=NEW)).load(CPU)
    outputs, shapes = _passes(model, _prompts())
    prompts, decoding = (
        [rows for rows, width in shapes if width > 1],
        [rows for rows, width in shapes if width == 1],
    )
    assert "stop" in list(outputs["finish_reason"]), "some rows stop early"
    assert sum(prompts) == 30 and len(decoding) == NEW - 1  # the prompts' passes, then one a token
    assert decoding[0] < 30 and decoding == sorted(decoding, reverse=True), decoding


def test_prompts_pass_in_groups_padded_to_their_own_longest(lm: Path) -> None:
    """Prompts of very different lengths are run in several passes of similar lengths, each padded
    to its own longest, and the batch's padded cost counts those passes: less than one pass padded
    to the longest prompt, and no less than the prompts themselves."""
    model = HFCausalSpec(lm, generation=GenerationSettings(chat="off", max_new_tokens=NEW)).load(CPU)
    items = [model.prepare(t) for t in _prompts()]
    _, shapes = _passes(model, _prompts())
    prompts = [(rows, width) for rows, width in shapes if width > 1]
    lengths = [len(item.ids) for item in items]
    assert len(prompts) > 1 and sum(rows * width for rows, width in prompts) < 30 * max(lengths), prompts
    batch = model.collate(items)
    assert batch.padded_cost == sum(rows * width for rows, width in prompts) + 30 * NEW
    assert sum(lengths) + 30 * NEW <= batch.padded_cost
    assert sorted(row for group in batch.groups for row in group) == list(range(30))


@pytest.mark.parametrize("sampling", [{}, {"temperature": 1.2, "seed": 3}], ids=["greedy", "sampled"])
def test_waiting_rows_join_as_rows_finish(
    lm: Path, monkeypatch: pytest.MonkeyPatch, sampling: dict[str, Any]
) -> None:
    """With a KV budget for a few rows, the others wait and join mid-decode as rows finish, in their
    own prefill pass; every row's text is what it is when all rows decode at once."""
    settings = GenerationSettings(chat="off", max_new_tokens=NEW, **sampling)
    model = HFCausalSpec(lm, generation=settings).load(CPU)
    texts = _prompts()
    together, _ = _passes(model, texts)
    costs = sorted(len(model.prepare(t).ids) + NEW for t in texts)
    monkeypatch.setattr(model, "KV_BUDGET", {"cpu": sum(costs[-6:])})  # six of the longest at once
    joined, shapes = _passes(model, texts)
    for name in together:
        assert list(joined[name]) == list(together[name]), name
    fit = max(k for k in range(len(costs) + 1) if sum(costs[:k]) <= sum(costs[-6:]))  # the cheapest
    assert max(rows for rows, _ in shapes) <= fit < len(texts) and len(shapes) > NEW, shapes


def test_batches_were_mixed_and_left_padded(lm: Path) -> None:
    model = HFCausalSpec(lm, generation=GenerationSettings(chat="off")).load(CPU)
    items = [model.prepare(t) for t in ("short", "a much longer text than the other one")]
    batch = model.collate(items, multiple=8)
    assert batch.input_ids.shape[1] % 8 == 0
    assert batch.attention_mask[0, -1] == 1 and batch.attention_mask[0, 0] == 0
    areas = sum(len(group) * max(len(items[row].ids) for row in group) for group in batch.groups)
    assert batch.padded_cost == areas + 2 * model.settings.max_new_tokens
    assert items[0].cost == len(items[0].ids) + 128


def test_chat_template_renders_system_and_user(lm: Path) -> None:
    settings = GenerationSettings(prompt="Summarise: {text}", system="Be brief.", max_new_tokens=4)
    model = HFCausalSpec(lm, generation=settings).load(CPU)
    assert model.render("x") == "<|system|>Be brief.</s><|user|>Summarise: x</s><|assistant|>"
    plain = HFCausalSpec(lm, generation=GenerationSettings(prompt="Q: {text}", chat="off")).load(CPU)
    assert plain.render("x") == "Q: x" and plain.prepare("x").ids[0] == 0  # the BOS
    assert model.prepare("x").ids[0] != 0  # the template holds its own special tokens


def test_settings_are_part_of_the_version(lm: Path) -> None:
    base = GenerationSettings()
    variants = [
        base,
        GenerationSettings(prompt="Say: {text}"),
        GenerationSettings(system="s"),
        GenerationSettings(chat="off"),
        GenerationSettings(max_new_tokens=5),
        GenerationSettings(temperature=0.7),
        GenerationSettings(temperature=0.7, top_p=0.9),
        GenerationSettings(temperature=0.7, seed=3),
        GenerationSettings(engine="vllm"),  # another engine computes otherwise
    ]
    versions = {HFCausalSpec(lm, generation=s).describe().version for s in variants}
    assert len(versions) == len(variants)
    assert HFCausalSpec(lm).describe().version == HFCausalSpec(lm, generation=base).describe().version
    greedy = HFCausalSpec(lm, generation=GenerationSettings(top_p=0.5, seed=9)).describe().version
    assert (
        greedy == HFCausalSpec(lm).describe().version
    )  # greedy draws nothing: top_p and seed change nothing
    spec = with_generation(HFCausalSpec(lm), GenerationSettings(prompt="Say: {text}"))
    assert spec.describe().version == HFCausalSpec(lm, generation=variants[1]).describe().version


def test_an_engine_s_own_settings_are_kept_sorted_and_left_to_it_for_the_version() -> None:
    settings = GenerationSettings(engine="vllm", engine_options={"max_num_seqs": 8, "dtype": "float32"})
    assert settings.engine_options == (("dtype", "float32"), ("max_num_seqs", 8))
    assert settings.engine_settings() == {"dtype": "float32", "max_num_seqs": 8}
    assert hash(settings) == hash(GenerationSettings(engine="vllm", engine_options=settings.engine_options))
    assert settings.token() == GenerationSettings(engine="vllm").token()  # the engine adds what matters
    assert "engine" not in GenerationSettings().token()  # versions made before the choice still hold


def test_an_integer_temperature_or_top_p_is_the_same_setting_as_its_float(lm: Path) -> None:
    """The engine's API takes ``temperature=1``; the form and the command line give 1.0: one version."""

    as_int = GenerationSettings(temperature=1, top_p=1)
    assert as_int.token() == GenerationSettings(temperature=1.0, top_p=1.0).token()
    spec = flat_spec(
        source="sqlite:///x.db", results="sqlite:///x.db", results_table="r", generation={"temperature": 2}
    )
    versions = {
        HFCausalSpec(lm, generation=settings).describe().version
        for settings in (spec.model.generation, GenerationSettings(temperature=2.0))
    }
    assert len(versions) == 1


def test_sampling_is_reproducible_whatever_the_batch(lm: Path) -> None:
    texts = _prompts(12)
    settings = GenerationSettings(chat="off", max_new_tokens=12, temperature=1.0, top_p=0.9, seed=7)
    spec = HFCausalSpec(lm, generation=settings)
    wide, narrow = _score(spec, texts, max_tokens=2000), _score(spec, texts, max_tokens=60)
    assert [r["generated_text"] for r in wide] == [r["generated_text"] for r in narrow]
    other = _score(HFCausalSpec(lm, generation=GenerationSettings(**{**vars(settings), "seed": 8})), texts)
    assert [r["generated_text"] for r in other] != [r["generated_text"] for r in wide]


def test_a_prompt_without_room_is_a_dead_letter(lm: Path) -> None:
    model = HFCausalSpec(lm, generation=GenerationSettings(chat="off", max_new_tokens=250)).load(CPU)
    with pytest.raises(InputError, match="leaves room for 6"):
        model.prepare("a text far longer than six tokens, in any tokenizer at all")
    with pytest.raises(ConfigError, match="no room for a prompt"):
        HFCausalSpec(lm, generation=GenerationSettings(max_new_tokens=256)).describe()


def test_nul_characters_are_stripped(lm: Path) -> None:
    model = HFCausalSpec(lm, generation=GenerationSettings(chat="off")).load(CPU)
    nul = model._tokenizer("\x00")["input_ids"][-1]
    outputs = torch.tensor([[3, 2, 0, nul, nul] + [1] * 126])
    assert model.to_columns(outputs)["generated_text"][0] == ""


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"prompt": "no column"}, "names no column"),
        ({"prompt": "{text!r}"}, "not a bare column name"),
        ({"prompt": "{text.upper}"}, "not a bare column name"),
        ({"prompt": "{"}, "not a valid template"),
        ({"chat": "maybe"}, "chat must be one of"),
        ({"max_new_tokens": 0}, "max_new_tokens must be an integer at least 1"),
        ({"temperature": -1.0}, "temperature must be a number at least 0"),
        ({"top_p": 0.0}, "top_p must be a number above 0"),
        ({"seed": -1}, "seed must be an integer at least 0"),
        ({"engine": "tgi"}, "engine must be one of hf, vllm; got 'tgi'"),
        ({"engine_options": {"max_num_seqs": 8}}, "engine hf takes none; give --engine vllm"),
        ({"engine": "vllm", "engine_options": [1]}, "engine_options must map setting names to values"),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GenerationSettings(**settings)


def test_chat_on_needs_a_template(tmp_path: Path) -> None:
    root = tiny_causal_lm(tmp_path)
    with pytest.raises(ConfigError, match="no chat template"):
        HFCausalSpec(root, generation=GenerationSettings(chat="on")).describe()
    assert isinstance(HFCausalSpec(root).load(CPU), HFGenerator)


def test_a_causal_directory_loads_as_a_generator(lm: Path) -> None:
    from shardwise.models import get_spec
    from shardwise.models.hf.directory import directory_spec

    assert isinstance(directory_spec(lm), HFCausalSpec)
    assert isinstance(get_spec(str(lm)), HFCausalSpec)
    assert get_spec(str(lm)).describe().outputs[0].name == "generated_text"


def test_generation_settings_are_refused_for_an_encoder() -> None:
    from shardwise.models import get_spec

    with pytest.raises(ConfigError, match="model 'tiny' takes no generation settings"):
        with_generation(get_spec("tiny"), GenerationSettings())
    assert with_generation(get_spec("tiny"), None) is get_spec("tiny")


def test_run_spec_threads_the_settings_and_checks_the_prompt() -> None:

    base = {"source": "sqlite:///x.db", "results": "sqlite:///x.db", "results_table": "r"}
    assert flat_spec(**base).model.generation is None
    settings = GenerationSettings(prompt="Q: {body}", temperature=0.5)
    spec = flat_spec(**base, text_column="body", generation=settings)
    assert spec.model.generation == settings
    assert (
        flat_spec(**base, generation=settings.model_dump(), text_column="body") == spec
    )  # read back from JSON
    assert flat_spec(
        **base, text_column="body", generation=GenerationSettings(prompt="{title}: {body}")
    ).input_columns() == {"title": "prompt"}
    assert flat_spec(**base, text_pair_column="doc").input_columns() == {"doc": "text pair"}
    with pytest.raises(ConfigError, match=re.escape("names the key column {id}")):
        flat_spec(**base, generation=GenerationSettings(prompt="{id}: {text}"))
    with pytest.raises(ConfigError, match="prompt and text_pair_column 'doc' both given"):
        flat_spec(**base, generation=GenerationSettings(), text_pair_column="doc")
    with pytest.raises(ConfigError, match="top_p must be"):
        flat_spec(**base, generation={"top_p": 2.0})


def test_a_generator_commits_in_smaller_chunks(lm: Path) -> None:
    """A generated row costs a pass per new token: its shards commit every 1024 rows, not 8192, unless
    the run says otherwise (a kill loses at most one chunk)."""
    from shardwise.models import get_spec
    from shardwise.pipeline.chunks import DEFAULT_CHUNK_ROWS, GENERATION_CHUNK_ROWS
    from shardwise.pipeline.worker import WorkerCache, chunk_rows

    cache = WorkerCache(get_spec)
    base = {"source": "sqlite:///x.db", "results": "sqlite:///x.db", "results_table": "r"}

    def rows(spec: Any) -> int:
        return chunk_rows(spec, cache.spec(spec.model, spec.run.retry))

    assert rows(flat_spec(**base, model=str(lm))) == GENERATION_CHUNK_ROWS == 1024
    assert rows(flat_spec(**base, model="tiny")) == DEFAULT_CHUNK_ROWS == 8192
    assert rows(flat_spec(**base, model=str(lm), chunk_rows=64)) == 64


def test_a_generator_batches_by_cost_alone(lm: Path) -> None:
    """Splitting a batch to save padding would double the decode passes: a generator's engine cuts
    batches of four KV budgets by cost only (rows beyond one budget wait and join), unless the run
    gives its own settings."""
    model = HFCausalSpec(lm, generation=GenerationSettings(chat="off", max_new_tokens=NEW)).load(CPU)
    engine = Engine(model)
    assert (engine.config.max_tokens, engine.config.pad_slack) == (4 * model.KV_BUDGET["cpu"], 2**31 - 1)
    run = engine.run(enumerate(_prompts()))
    assert all(r.ok for r in run)
    assert run.stats.batches == 1, "30 prompts of very different lengths make one batch"
    assert Engine(model, EngineConfig(max_tokens=500, pad_slack=0)).config.max_tokens == 500
