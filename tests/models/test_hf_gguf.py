"""GGUF files as generators: the same outputs as the directory they came from, versions, context, chat.

The GGUF is written in the test from the tiny random Llama of
``tests/hf_builders.py`` (``tests/gguf_builders.py``), each in a folder of
its own, so the same weights load both ways and must generate the same text.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from gguf_builders import write_gguf
from hf_builders import CHAT_TEMPLATE, tiny_causal_lm

from shardwise import ConfigError, Engine, EngineConfig
from shardwise.corpus import harvest_docstrings
from shardwise.hashing import hash_file
from shardwise.model.converted import ConvertedCache
from shardwise.model.generation import ChatMode, GenerationSettings
from shardwise.models import get_spec
from shardwise.models.gguf.spec import GGUFCausalSpec
from shardwise.models.hf.causal.model import HFCausalSpec, HFGenerator

pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
pytest.importorskip("accelerate")

CPU = torch.device("cpu")
CONTEXT = 384


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"), chat_template=CHAT_TEMPLATE, context=CONTEXT)


@pytest.fixture(scope="module")
def gguf_file(lm: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(lm, tmp_path_factory.mktemp("gguf") / "tiny.gguf", chat_template=CHAT_TEMPLATE)


def _score(spec: Any, texts: Sequence[str]) -> list[dict[str, Any]]:
    engine = Engine(spec.load(CPU), EngineConfig(max_tokens=600, precision="fp32"))
    results = list(engine.run(enumerate(texts)))
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    return [dict(r.values or {}) for r in results]


@pytest.mark.parametrize("chat", ["off", "on"])
def test_the_gguf_generates_what_its_directory_generates(lm: Path, gguf_file: Path, chat: ChatMode) -> None:
    texts = [text[: 10 + 41 * i % 250] for i, text in enumerate(harvest_docstrings(16))]
    settings = GenerationSettings(prompt="Summarise: {text}", chat=chat, max_new_tokens=12)
    from_dir = _score(HFCausalSpec(lm, generation=settings), texts)
    from_gguf = _score(GGUFCausalSpec(gguf_file, generation=settings), texts)
    assert from_gguf == from_dir
    assert len({row["generated_text"] for row in from_gguf}) > 1  # not one degenerate answer


def test_a_gguf_path_loads_as_the_one_generator(gguf_file: Path) -> None:
    spec = get_spec(str(gguf_file))
    assert isinstance(spec, GGUFCausalSpec) and spec.name == f"hf:{gguf_file.resolve()}"
    assert isinstance(get_spec(f"hf:{gguf_file}"), GGUFCausalSpec)
    assert spec.describe().outputs[0].name == "generated_text"
    assert isinstance(spec.load(CPU), HFGenerator)


def test_describe_reads_the_header_and_loads_no_weights(
    gguf_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformers

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("describe() loaded weights")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    info = GGUFCausalSpec(gguf_file, generation=GenerationSettings(max_new_tokens=4)).describe()
    assert info.max_length == CONTEXT  # llama.context_length
    with pytest.raises(ConfigError, match=f"max_new_tokens {CONTEXT} leaves no room for a prompt"):
        GGUFCausalSpec(gguf_file, generation=GenerationSettings(max_new_tokens=CONTEXT)).describe()


def test_the_version_hashes_the_file_and_the_settings(lm: Path, gguf_file: Path, tmp_path: Path) -> None:
    version = GGUFCausalSpec(gguf_file).describe().version
    moved = tmp_path / "elsewhere" / "renamed.gguf"
    moved.parent.mkdir()
    shutil.copy(gguf_file, moved)
    assert GGUFCausalSpec(moved).describe().version == version  # the bytes, not the name
    other = write_gguf(lm, tmp_path / "other" / "tiny.gguf", chat_template=CHAT_TEMPLATE, name="other")
    assert GGUFCausalSpec(other).describe().version != version
    prompt = GGUFCausalSpec(gguf_file, generation=GenerationSettings(prompt="Say: {text}"))
    assert prompt.describe().version != version
    assert HFCausalSpec(lm).describe().version != version


def test_chat_auto_on_and_off(lm: Path, gguf_file: Path, tmp_path: Path) -> None:
    settings = GenerationSettings(prompt="Summarise: {text}", system="Be brief.", max_new_tokens=4)
    chatting = GGUFCausalSpec(gguf_file, generation=settings).load(CPU)
    assert chatting.render("x") == "<|system|>Be brief.</s><|user|>Summarise: x</s><|assistant|>"
    plain = GGUFCausalSpec(gguf_file, generation=GenerationSettings(prompt="Q: {text}", chat="off"))
    assert plain.load(CPU).render("x") == "Q: x" and plain.load(CPU).prepare("x").ids[0] == 0  # BOS
    bare = write_gguf(lm, tmp_path / "bare" / "tiny.gguf")  # no chat template in the file
    assert not GGUFCausalSpec(bare).chat()
    assert GGUFCausalSpec(bare).load(CPU).render("x") == "x"
    with pytest.raises(ConfigError, match=r"chat is on, and the tokenizer in .* has no chat template"):
        GGUFCausalSpec(bare, generation=GenerationSettings(chat="on")).describe()


@pytest.mark.parametrize("missing", ["gguf", "accelerate"])
def test_a_missing_package_names_the_extra(
    gguf_file: Path, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # import raises ImportError
    with pytest.raises(ConfigError, match=r"install them with: pip install 'shardwise\[gguf\]'") as caught:
        GGUFCausalSpec(gguf_file).describe()
    assert f"({missing} is missing)" in str(caught.value) and "\n" not in str(caught.value)


def test_unusable_files_are_refused_in_one_line(gguf_file: Path, lm: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"does not exist; give the path of a \.gguf file"):
        get_spec(str(tmp_path / "absent.gguf")).describe()
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all")
    with pytest.raises(ConfigError, match="is not a readable GGUF file"):
        GGUFCausalSpec(garbage).describe()
    encoder = tmp_path / "encoder" / "bert.gguf"
    encoder.parent.mkdir()
    writer = gguf.GGUFWriter(str(encoder), "bert")  # a header alone: no tensor is read
    writer.add_context_length(512)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    with pytest.raises(ConfigError, match="architecture 'bert', not a causal language model"):
        GGUFCausalSpec(encoder).describe()
    beside = lm / "tiny.gguf"
    shutil.copy(gguf_file, beside)
    try:
        with pytest.raises(ConfigError, match=r"sits beside a tokenizer\.json"):
            GGUFCausalSpec(beside).describe()
    finally:
        beside.unlink()


@pytest.mark.parametrize("chat", ["off", "on"])
def test_a_kept_conversion_generates_what_the_file_generates(
    gguf_file: Path, tmp_path: Path, chat: ChatMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = [text[: 10 + 37 * i % 200] for i, text in enumerate(harvest_docstrings(8))]
    settings = GenerationSettings(prompt="Summarise: {text}", chat=chat, max_new_tokens=8)
    spec = GGUFCausalSpec(gguf_file, generation=settings)
    cache = ConvertedCache(tmp_path / "converted")
    kept = spec.keeping(cache)
    assert kept == spec and kept.describe() == spec.describe()  # where weights load from is no identity
    first = _score(kept, texts)  # converts into the cache
    (entry,) = cache.entries()
    assert kept.pretrained() == (entry.path, {"local_files_only": True})
    assert entry.key["file"] == hash_file(gguf_file)
    from transformers import AutoModelForCausalLM

    loads: list[dict[str, Any]] = []
    real = AutoModelForCausalLM.from_pretrained

    def counted(*args: Any, **kwargs: Any) -> Any:
        loads.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", counted)
    again = _score(kept, texts)  # reads the entry: nothing de-quantised
    assert loads and all("gguf_file" not in kwargs for kwargs in loads)
    assert first == again == _score(spec, texts)
    assert any("gguf_file" in kwargs for kwargs in loads)  # the plain spec still reads the file


def test_a_corrupt_kept_conversion_is_converted_again(gguf_file: Path, tmp_path: Path) -> None:
    settings = GenerationSettings(prompt="Summarise: {text}", chat="off", max_new_tokens=6)
    cache = ConvertedCache(tmp_path / "converted")
    kept = GGUFCausalSpec(gguf_file, generation=settings).keeping(cache)
    texts = ["a short text", "another text, a little longer than the first"]
    before = _score(kept, texts)
    (entry,) = cache.entries()
    weights = entry.path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # a disk that filled up, a copy cut short
    assert _score(kept, texts) == before
    assert [e.path for e in cache.entries()] == [entry.path]


def test_vllm_reads_a_plain_float_directory_kept_or_of_its_process(gguf_file: Path, tmp_path: Path) -> None:
    """vLLM 0.32 loads no GGUF file (issue 45): engine vllm is given the kept conversion, whose config
    has no ``quantization_config`` (vLLM would take it for a GGUF checkpoint and refuse it); without a
    cache, a directory the process converts into, once."""
    settings = GenerationSettings(chat="off", max_new_tokens=6, engine="vllm")
    cache = ConvertedCache(tmp_path / "converted")
    folder, pretrained = GGUFCausalSpec(gguf_file, generation=settings).keeping(cache).pretrained()
    (entry,) = cache.entries()
    assert (folder, pretrained) == (entry.path, {"local_files_only": True})
    alone = GGUFCausalSpec(gguf_file, generation=settings)
    here, _ = alone.pretrained()
    assert here != folder and alone.pretrained()[0] == here  # converted once per process
    for directory in (folder, here):
        config = json.loads((directory / "config.json").read_text())
        assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
        assert not list(directory.glob("*.gguf"))


def test_the_header_reader_gives_what_gguf_s_own_reader_gives(gguf_file: Path, tmp_path: Path) -> None:
    from shardwise.models.gguf.header import header_values

    fields = gguf.GGUFReader(gguf_file, "r").fields
    expected = {key: field.contents() for key, field in fields.items() if not key.startswith("GGUF.")}
    assert header_values(gguf_file, lambda key: not key.startswith("GGUF.")) == expected
    assert "tokenizer.ggml.tokens" in expected and "tokenizer.chat_template" in expected
    assert header_values(gguf_file, lambda key: key == "general.architecture") == {
        "general.architecture": "llama"
    }
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(gguf_file.read_bytes()[:2000])  # inside the token list
    with pytest.raises(ValueError, match="cut short"):
        header_values(cut, lambda key: True)
    with pytest.raises(ConfigError, match="is not a readable GGUF file"):
        GGUFCausalSpec(cut).describe()


def test_a_full_disk_converts_in_memory_with_one_warning(
    gguf_file: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 45: a disk that fills up while the conversion is written (safetensors reports it as its own
    error, not an OSError) failed the run; now the model converts in memory, as without a cache."""
    from full_disk import full_disk

    settings = GenerationSettings(prompt="Summarise: {text}", chat="off", max_new_tokens=6)
    spec = GGUFCausalSpec(gguf_file, generation=settings)
    cache = ConvertedCache(tmp_path / "converted")
    texts = ["a short text", "another text, a little longer than the first"]
    expected = _score(spec, texts)
    with full_disk(gguf_file.stat().st_size // 2):  # the weights do not fit
        assert _score(spec.keeping(cache), texts) == expected
        assert _score(spec.keeping(cache), texts) == expected
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "cannot keep converted models in" in warned[0], warned
    assert cache.entries() == []
