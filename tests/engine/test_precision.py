"""Precision: what auto picks on which hardware, what is refused, the guard, and bf16 on a CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from spec_builder import flat_spec

from shardwise import Engine, EngineConfig
from shardwise import precision as precision_mod
from shardwise.corpus import harvest_docstrings
from shardwise.errors import ConfigError
from shardwise.model import ModelInfo, OutputColumn
from shardwise.precision import check_precision, resolve_precision, versioned
from shardwise.precision.guard import INT8_MIN_AGREEMENT, agreement, minimum_agreement, shown

CPU = torch.device("cpu")


@pytest.mark.parametrize(("native_bf16", "expected"), [(True, "bf16"), (False, "fp32")])
def test_auto_on_a_cpu_takes_bf16_only_where_it_is_native(
    monkeypatch: pytest.MonkeyPatch, native_bf16: bool, expected: str
) -> None:
    monkeypatch.setattr(precision_mod, "cpu_has_native_bf16", lambda: native_bf16)
    assert resolve_precision("auto", CPU) == expected
    assert resolve_precision("fp32", CPU) == "fp32"
    assert resolve_precision("bf16", CPU) == "bf16", "an explicit bf16 is slow but correct on any CPU"


def test_auto_keeps_float32_for_a_model_with_label_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision_mod, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _device=None: (9, 0))
    classifier = (OutputColumn("label", "text"), OutputColumn("score", "float"))
    regression = (OutputColumn("score", "float"),)
    for device in (CPU, torch.device("cuda", 0)):
        assert resolve_precision("auto", device, classifier) == "fp32", "a label flips at a near-tie"
        assert resolve_precision("auto", device, regression) == "bf16"
        assert resolve_precision("bf16", device, classifier) == "bf16", "an explicit choice is kept"


@pytest.mark.parametrize(
    ("capability", "expected"), [((9, 0), "bf16"), ((8, 0), "bf16"), ((7, 5), "fp16"), ((6, 1), "fp32")]
)
def test_auto_on_cuda_follows_the_compute_capability(
    monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], expected: str
) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert resolve_precision("auto", torch.device("cuda", 0)) == expected


def test_bf16_on_a_gpu_without_it_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    with pytest.raises(
        ConfigError, match=r"precision bf16 is not supported on cuda:0 \(Tesla T4\); use --precision fp16"
    ):
        resolve_precision("bf16", torch.device("cuda", 0))


def test_fp16_on_a_cpu_and_unknown_names_are_refused() -> None:
    with pytest.raises(ConfigError, match="fp16 is not computed natively on CPUs"):
        resolve_precision("fp16", CPU)
    with pytest.raises(
        ConfigError, match="precision must be one of auto, fp32, bf16, fp16, int8; got 'half'"
    ):
        check_precision("half")


def test_the_precision_is_part_of_the_results_version() -> None:
    assert versioned("abc", "fp32") == "abc", "float32 keeps the bare hash: older results stay current"
    assert versioned("abc", "bf16") == "abc+bf16"
    assert versioned("abc", "fp16") != versioned("abc", "bf16")
    assert versioned("abc", "int8") == "abc+int8"


@pytest.mark.parametrize("native_bf16", [True, False])
def test_auto_never_picks_int8(monkeypatch: pytest.MonkeyPatch, native_bf16: bool) -> None:
    monkeypatch.setattr(precision_mod, "cpu_has_native_bf16", lambda: native_bf16)
    monkeypatch.setattr(precision_mod, "cpu_int8_kernel", lambda: "amx-int8")
    for outputs in ((), (OutputColumn("label", "text"),), (OutputColumn("score", "float"),)):
        assert resolve_precision("auto", CPU, outputs) != "int8"
    assert EngineConfig(precision="auto").for_device(CPU).precision != "int8"
    assert resolve_precision("int8", CPU) == "int8", "only an explicit choice runs int8"


def test_int8_off_a_cpu_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    with pytest.raises(
        ConfigError, match=r"precision int8 runs on CPUs only, not on cuda:0; use --precision bf16"
    ):
        resolve_precision("int8", torch.device("cuda", 0))


def test_int8_for_gpu_workers_is_refused_by_a_cpu_only_planner() -> None:
    from shardwise.pipeline.run_precision import hardware_precision

    if torch.cuda.is_available():
        pytest.skip("this host has CUDA: the planner's own device check applies")
    spec = flat_spec(
        source="x.db",
        results="x.db",
        results_table="r",
        table="docs",
        model="tiny",
        device="cuda",
        precision="int8",
    )
    with pytest.raises(ConfigError, match="precision int8 runs on CPUs only"):
        hardware_precision(spec, ModelInfo("tiny", "v", (), 8))


def test_a_model_that_batches_itself_runs_in_its_own_precision() -> None:
    """vLLM's dtype or an endpoint's server decides: auto is fp32 (no cast, no guard), a cast is refused."""
    from shardwise.pipeline.run_precision import hardware_precision

    engine = ModelInfo("hf:/m", "v", (OutputColumn("generated_text", "text"),), 512, batches_itself=True)
    base = {"source": "x.db", "results": "x.db", "results_table": "r", "table": "docs", "model": "m"}
    for device in ("cpu", "cuda"):
        assert hardware_precision(flat_spec(**base, device=device), engine)[0] == "fp32"
    with pytest.raises(ConfigError, match=r"precision bf16 is Shardwise's cast .* drop --precision"):
        hardware_precision(flat_spec(**base, precision="bf16"), engine)


def test_the_guard_minimum_defaults_by_precision_and_messages_round_down() -> None:
    assert minimum_agreement("int8") == INT8_MIN_AGREEMENT == 0.99
    assert minimum_agreement("bf16") == 0.999
    assert minimum_agreement("int8", 0.995) == 0.995, "an explicit minimum wins"
    assert shown(0.9999996) == "0.99999", "never 1.00000 beside a minimum of 1.0"


def test_the_guard_measures_agreement_with_float32(tiny_model) -> None:
    assert agreement(tiny_model, "fp32") == 1.0
    found = agreement(tiny_model, "bf16")
    assert 0.99 < found < 1.0, "bf16 rounds: close to float32, not equal"


def test_bf16_on_a_cpu_stays_close_to_float32_and_returns_float32(tiny_model) -> None:
    texts = harvest_docstrings(300)
    full = np.stack([r.values["embedding"] for r in Engine(tiny_model).run(enumerate(texts))])  # type: ignore[index]
    run = Engine(tiny_model, EngineConfig(precision="bf16")).run(enumerate(texts))
    half = np.stack([r.values["embedding"] for r in run])  # type: ignore[index]
    assert half.dtype == np.float32
    assert not np.array_equal(full, half), "bf16 really ran"
    cosine = (full * half).sum(1) / np.linalg.norm(full, axis=1) / np.linalg.norm(half, axis=1)
    assert cosine.min() > 0.999


def test_auto_in_the_engine_config_resolves_for_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision_mod, "cpu_has_native_bf16", lambda: True)
    assert EngineConfig(precision="auto").for_device(CPU).precision == "bf16"
    assert EngineConfig().for_device(CPU).precision == "fp32", "a bare engine defaults to float32"
