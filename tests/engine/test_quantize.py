"""int8: the quantized copy of a model, what the engine runs in int8, and which CPUs offer int8 kernels."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch
from hf_builders import tiny_classifier
from torch import nn

from shardwise import Engine, EngineConfig
from shardwise.corpus import harvest_docstrings
from shardwise.errors import ConfigError
from shardwise.models.hf.encoders.classifier import HFClassifierSpec
from shardwise.models.hf.encoders.tiny import TinyModel
from shardwise.precision import for_precision, resolve_precision
from shardwise.precision.guard import INT8_MIN_AGREEMENT, agreement
from shardwise.precision.quantize import Int8Linear, int8_copy, int8_kernel


def test_the_int8_copy_quantizes_linear_layers_once_and_leaves_the_original(tiny_model: TinyModel) -> None:
    quantized = for_precision(tiny_model, "int8")
    assert quantized is for_precision(tiny_model, "int8"), "made once per loaded model"
    assert for_precision(tiny_model, "fp32") is tiny_model
    layers = dict(cast(Any, quantized)._net.named_modules())
    assert isinstance(layers["layers.layers.0.linear1"], Int8Linear)
    assert isinstance(dict(cast(Any, tiny_model)._net.named_modules())["layers.layers.0.linear1"], nn.Linear)
    # MultiheadAttention reads its output projection's weight itself: it stays float32.
    assert type(layers["layers.layers.0.self_attn.out_proj"]) is not Int8Linear
    assert (quantized.name, quantized.version, quantized.outputs) == (
        tiny_model.name,
        tiny_model.version,
        tiny_model.outputs,
    )


def test_the_engine_in_int8_gives_what_a_plain_quantized_forward_gives(tiny_model: TinyModel) -> None:
    texts = harvest_docstrings(80)
    run = Engine(tiny_model, EngineConfig(precision="int8")).run(enumerate(texts))
    ours = np.stack([r.values["embedding"] for r in run])  # type: ignore[index]
    quantized = for_precision(tiny_model, "int8")
    with torch.inference_mode():
        plain = np.stack([quantized.run(quantized.collate([quantized.prepare(t)])).numpy()[0] for t in texts])
        full = np.stack(
            [tiny_model.run(tiny_model.collate([tiny_model.prepare(t)])).numpy()[0] for t in texts]
        )
    # Batched and one by one, float rounding in attention differs in the last bits and can move an
    # activation across an int8 step: equal to within that, far closer than int8 is to float32.
    np.testing.assert_allclose(ours, plain, rtol=1e-3, atol=1e-4)
    assert not np.allclose(ours, full, rtol=1e-6, atol=1e-7), "int8 really ran"
    cosine = (ours * full).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(full, axis=1)
    assert cosine.min() > 0.99


def test_the_guard_measures_int8_against_float32(tiny_model: TinyModel) -> None:
    found = agreement(tiny_model, "int8")
    assert 0.99 < found < 1.0, "int8 rounds: close to float32, not equal"


def test_an_int8_layer_stays_close_to_its_float_layer_even_with_an_outlier_channel() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(64, 32)
    x = torch.randn(16, 64)
    x[:, 3] *= 60  # one outlier channel, as transformers' activations have
    smooth = x.abs().amax(0).sqrt() / linear.weight.detach().abs().amax(0).sqrt()
    with torch.no_grad():
        want = linear(x)
        got = Int8Linear(linear, smooth)(x)
        plain = Int8Linear(linear)(x)
    cosine = nn.functional.cosine_similarity(want, got, dim=1)
    assert cosine.min() > 0.999
    assert (want - got).abs().mean() < (want - plain).abs().mean(), "smoothing helps the outlier rows"


def test_a_model_without_linear_layers_is_refused(tiny_model: TinyModel) -> None:
    flat = copy.copy(tiny_model)
    flat._net = nn.Identity()
    with pytest.raises(ConfigError, match="has no Linear layers, so int8 has nothing to quantize; use"):
        int8_copy(flat, lambda _model: None)


@pytest.mark.parametrize(
    ("flags", "kernel"),
    [
        ({"avx512f", "avx512_vnni", "amx_int8"}, "amx-int8"),
        ({"avx512f", "avx512_vnni", "avx512_bf16"}, "avx512-vnni"),
        ({"avx2", "avx_vnni"}, "avx-vnni"),
        ({"avx2"}, "none"),
    ],
)
def test_the_int8_kernel_is_read_from_the_cpu_flags(flags: set[str], kernel: str) -> None:
    assert int8_kernel(frozenset(flags)) == kernel


def test_a_classifier_goes_through_the_same_guard_on_its_labels_and_scores(tmp_path: Path) -> None:
    model = HFClassifierSpec(tiny_classifier(tmp_path / "clf")).load(torch.device("cpu"))
    assert resolve_precision("auto", model.device, model.outputs) == "fp32"
    quantized: Any = for_precision(model, "int8")
    assert isinstance(quantized._net.classifier, Int8Linear), "the head is a Linear too"
    # The guard's figure for labels is the share of calibration texts whose values all stay equal.
    assert agreement(model, "int8") < INT8_MIN_AGREEMENT, "this random classifier's scores move: refused"
