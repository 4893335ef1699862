"""bf16 and fp16: the copy whose Linear weights are stored cast, and that it computes what autocast did."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch
from hf_builders import tiny_causal_lm
from torch import nn

from shardwise import Engine, EngineConfig
from shardwise.corpus import harvest_docstrings
from shardwise.models.hf.causal.model import HFCausalSpec
from shardwise.models.hf.encoders.tiny import TinyModel
from shardwise.precision import autocast, for_precision
from shardwise.precision.cast_copy import cast_copy


def _tensors(net: nn.Module) -> dict[str, torch.Tensor]:
    return {**dict(net.named_parameters()), **dict(net.named_buffers())}


def test_the_copy_casts_linear_weights_once_shares_the_rest_and_leaves_the_original(
    tiny_model: TinyModel,
) -> None:
    before = {name: t.clone() for name, t in _tensors(cast(Any, tiny_model)._net).items()}
    bf16 = for_precision(tiny_model, "bf16")
    assert bf16 is for_precision(tiny_model, "bf16"), "made once per loaded model and precision"
    assert bf16 is not tiny_model and for_precision(tiny_model, "fp32") is tiny_model
    ours, theirs = _tensors(cast(Any, bf16)._net), _tensors(cast(Any, tiny_model)._net)
    assert ours.keys() == theirs.keys()
    linear = "layers.layers.0.linear1.weight"
    assert ours[linear].dtype == torch.bfloat16 and theirs[linear].dtype == torch.float32
    assert torch.equal(ours[linear], theirs[linear].to(torch.bfloat16))
    assert ours["layers.layers.0.linear1.bias"].dtype == torch.bfloat16
    # MultiheadAttention reads its output projection's weight itself: it stays float32, shared.
    out_proj, norm = "layers.layers.0.self_attn.out_proj.weight", "layers.layers.0.norm1.weight"
    assert ours[out_proj] is theirs[out_proj]
    assert ours[norm] is theirs[norm], "shared, not copied"
    for name, tensor in _tensors(cast(Any, tiny_model)._net).items():
        assert tensor.dtype == before[name].dtype and torch.equal(tensor, before[name]), name
    described = (tiny_model.name, tiny_model.version, tiny_model.outputs)
    assert (bf16.name, bf16.version, bf16.outputs) == described


def test_a_model_without_linear_layers_is_its_own_copy(tiny_model: TinyModel) -> None:
    flat = copy.copy(tiny_model)
    flat._net = nn.Sequential(nn.Identity())
    assert cast_copy(flat, torch.bfloat16) is flat


def test_the_copy_computes_exactly_what_autocast_computed_with_float32_weights(tiny_model: TinyModel) -> None:
    texts = harvest_docstrings(40)
    batch = tiny_model.collate([tiny_model.prepare(t) for t in texts])
    bf16 = for_precision(tiny_model, "bf16")
    with torch.inference_mode(), autocast(tiny_model.device, "bf16"):
        want, got = tiny_model.run(batch), bf16.run(batch)
    assert got.dtype == want.dtype and torch.equal(got, want), "autocast's own rounding, done once"
    with torch.inference_mode():
        full = tiny_model.run(batch)
    assert not torch.equal(got.float(), full), "bf16 really ran"


def test_the_engine_runs_the_copy_in_bf16(tiny_model: TinyModel) -> None:
    texts = harvest_docstrings(60)
    bf16 = for_precision(tiny_model, "bf16")
    run = Engine(tiny_model, EngineConfig(precision="bf16", max_batch_size=len(texts), max_tokens=10**6))
    ours = np.stack([r.values["embedding"] for r in run.run(enumerate(texts))])  # type: ignore[index]
    # One batch, in cost order: the copy on that batch under autocast, row for row.
    order = sorted(range(len(texts)), key=lambda i: (tiny_model.prepare(texts[i]).cost, i))
    batch = tiny_model.collate([tiny_model.prepare(texts[i]) for i in order])
    with torch.inference_mode(), autocast(tiny_model.device, "bf16"):
        plain = tiny_model.to_columns(bf16.run(batch).float())["embedding"]
    np.testing.assert_array_equal(ours[order], np.stack(plain))


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_generator_writes_the_same_text_from_its_cast_copy(tmp_path: Path, precision: str) -> None:
    root = tiny_causal_lm(tmp_path / "lm")
    model = HFCausalSpec(root).load(torch.device("cpu"))
    copied = for_precision(model, cast(Any, precision))
    net = cast(Any, copied)._net
    assert net.lm_head.weight.dtype != torch.float32, "the head is a Linear too"
    batch = model.collate([model.prepare("def add(a, b):"), model.prepare("The cat")])
    with torch.inference_mode(), autocast(model.device, cast(Any, precision)):
        want = model.to_columns(model.run(batch))
        got = copied.to_columns(copied.run(batch))
    assert want.keys() == got.keys()
    for name in want:
        assert list(got[name]) == list(want[name]), f"{name}: autocast's rounding, so the same tokens"
    assert any(want["completion_tokens"]), "it generated"
