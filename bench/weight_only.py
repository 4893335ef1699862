"""Weight-only int8 for a generator: measured by ``bench/generate.py --also weight-int8``, not shipped.

Decoding makes one token per row per pass, so a small batch reads every
weight to do little arithmetic with it: the pass is bound by memory, and
int8 weights (a quarter of float32's bytes) are the usual remedy. This copy
of a loaded generator stores each Linear's weight as int8, one symmetric
scale per output channel, and keeps activations in floating point:

- a pass over at most :data:`DECODE_ROWS` token rows (a decoding step)
  multiplies with PyTorch's ``_weight_int8pack_mm`` (bf16 activations, int8
  weights, the scales applied in the kernel);
- a longer pass (the prompts' pass) multiplies in float32 with the weight
  rounded back: ``_weight_int8pack_mm`` ran 1.5x slower than float32 there.

Why it is not what ``--precision int8`` runs for a generator (measured with
SmolLM2-135M on 64 rows, 32 new tokens, 2 threads, on an AVX2-only CPU;
figures in ``docs/engine.md``, "int8 on a CPU"): in batch, a decoding step
has as many rows as the batch, so it is bound by arithmetic, not memory, and
the copy ran at float32's speed (0.99x tokens/s), while the greedy texts of
more than half of the rows changed (46.9% equal to float32's). The bench
keeps it so that the figure can be measured again on other CPUs.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from shardwise.precision.quantize import linears

__all__ = ["DECODE_ROWS", "WeightInt8Linear", "weight_int8_copy"]

DECODE_ROWS = 64
"""Passes over at most this many token rows use the int8 kernel; longer ones multiply in float32."""


class WeightInt8Linear(nn.Module):
    """A Linear whose weight is int8 per output channel; its activations stay floating point."""

    weight_int8: torch.Tensor
    scale: torch.Tensor
    scale_bf16: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127
        self.register_buffer("weight_int8", (weight / scale[:, None]).round().clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale)
        self.register_buffer("scale_bf16", scale.to(torch.bfloat16))
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[0] > DECODE_ROWS:
            out = nn.functional.linear(rows.float(), self.weight_int8.float() * self.scale[:, None])
        else:
            out = torch.ops.aten._weight_int8pack_mm(
                rows.to(torch.bfloat16), self.weight_int8, self.scale_bf16
            ).float()
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], out.shape[-1])


def weight_int8_copy(model: Any) -> Any:
    """A shallow copy of ``model`` whose networks (its ``nn.Module`` attributes) have every Linear in
    weight-only int8; run it with the engine in fp32 (no autocast)."""
    quantized = copy.copy(model)
    with torch.inference_mode(False), torch.no_grad():
        for name, net in vars(model).items():
            if not isinstance(net, nn.Module):
                continue
            twin = copy.deepcopy(net)
            for sub, linear in linears(twin):
                parent, _, leaf = sub.rpartition(".")
                setattr(twin.get_submodule(parent) if parent else twin, leaf, WeightInt8Linear(linear))
            setattr(quantized, name, twin)
    return quantized
