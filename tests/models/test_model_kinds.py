"""Model kinds: Shardwise's own registered as a plug-in's would be, each ``--model`` value claimed by one,
its options a section of its own, and the pipeline's questions answered by the kind."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from shardwise.entry_points import _load
from shardwise.errors import ConfigError
from shardwise.model.kinds import (
    ENTRY_POINT_GROUP,
    Engine,
    ModelKind,
    _not_a_kind,
    claiming,
    engine_names,
    engine_of,
    load_model_kinds,
    model_kind,
    option_sections,
)
from shardwise.models import get_spec
from shardwise.pipeline.chunks import DEFAULT_CHUNK_ROWS, GENERATION_CHUNK_ROWS, IMAGE_CHUNK_ROWS

BUILT_IN = ("anthropic", "gguf", "hf", "openai", "plugins", "vllm")


def test_the_built_in_kinds_are_registered_in_the_entry_point_group() -> None:
    kinds = load_model_kinds()
    assert tuple(kinds)[: len(BUILT_IN)] == BUILT_IN, "Shardwise's own are asked first, by name"
    for name in BUILT_IN:
        assert isinstance(kinds[name], ModelKind) and kinds[name].name == name  # type: ignore[union-attr]
    assert ENTRY_POINT_GROUP == "shardwise.model_kinds"


def test_each_model_value_is_claimed_by_one_kind(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    values = {
        "tiny": "hf",
        "minilm": "hf",
        str(tmp_path / "dir"): "hf",
        "hf:/nowhere/model": "hf",
        str(tmp_path / "m.gguf"): "gguf",
        "hf:/x/m.GGUF": "gguf",
        "openai:gpt4": "openai",  # a module:attribute in form, a remote model first
        "openai-embed:text-embedding-3-small": "openai",
        "anthropic:claude-x": "anthropic",
        "mobilenet-v2": "plugins",
        "my_pkg.models:spec": "plugins",
    }
    for value, kind in values.items():
        found = claiming(value)
        assert found is not None and found.name == kind, (value, found)
        others = {k.name for k in map(model_kind, BUILT_IN) if k.claims(value) and k.name != kind}
        # A package.module:attribute in form is the plug-ins' only when no kind asked before claims it.
        assert others <= ({"plugins"} if value == "openai:gpt4" else set()), (value, others)
    assert claiming("no-such-model-anywhere") is None


def test_the_kind_answers_the_chunk_size_and_the_price(tmp_path: Path) -> None:
    from shardwise.models.hf.causal.model import HFCausalSpec

    assert model_kind("hf").chunk_rows(get_spec("tiny")) == DEFAULT_CHUNK_ROWS
    assert model_kind("hf").chunk_rows(HFCausalSpec(tmp_path)) == GENERATION_CHUNK_ROWS
    assert model_kind("openai").chunk_rows(get_spec("openai:m")) == GENERATION_CHUNK_ROWS
    assert model_kind("openai").chunk_rows(get_spec("openai-embed:e")) == DEFAULT_CHUNK_ROWS
    assert model_kind("plugins").chunk_rows(get_spec("mobilenet-v2")) == IMAGE_CHUNK_ROWS
    assert model_kind("openai").priced_as("openai-embed:e3") == ("openai", "e3")
    assert model_kind("anthropic").priced_as("anthropic:claude-x") == ("anthropic", "claude-x")
    assert model_kind("hf").priced_as("tiny") is None
    assert model_kind("plugins").imports_code("my_pkg.models:spec")
    assert not model_kind("plugins").imports_code("mobilenet-v2")


def test_options_are_a_section_per_kind_and_the_engine_is_a_kind() -> None:
    sections = option_sections()
    endpoint = sections["endpoint"]  # the openai and anthropic kinds share it: the first asked gives it
    assert endpoint.name == "anthropic" and "api_base" in endpoint.options.model_fields
    assert engine_names() == ("hf", "vllm")
    assert engine_of("hf") is None and isinstance(engine_of("vllm"), Engine)
    with pytest.raises(ConfigError, match="engine must be one of hf, vllm; got 'tgi'"):
        engine_of("tgi")
    with pytest.raises(ConfigError, match="vllm is an engine, not a model"):
        model_kind("vllm").spec("x")
    with pytest.raises(ConfigError, match="model kind 'nope' is not registered"):
        model_kind("nope")


def test_a_kind_that_cannot_load_is_refused_alone() -> None:
    broken = EntryPoint("broken", "no_such_module_anywhere:KIND", ENTRY_POINT_GROUP)
    found = _load("broken", [broken], "model kind", _not_a_kind).found
    assert isinstance(found, ConfigError) and "needs package 'no_such_module_anywhere'" in str(found)
    a_class = EntryPoint("hf", "shardwise.models.hf.kind:HFKind", ENTRY_POINT_GROUP)
    assert "must be a ModelKind object named 'hf'" in str(
        _load("hf", [a_class], "model kind", _not_a_kind).found
    )
    assert claiming("tiny") is not None, "the others still load"
