"""int8 on a CPU: a copy of a loaded model whose ``nn.Linear`` layers compute in int8.

Each Linear becomes :class:`Int8Linear`: weights int8 per output channel
(symmetric), activations int8 per row (per token, symmetric, measured on each
batch), an exact int32 matrix product (``torch._int_mm``), rescaled to
float32. Everything else (embeddings, LayerNorm, softmax, pooling) stays
float32. Before rounding, each input channel is smoothed SmoothQuant-style:
its activation is divided by ``s = max|x|^0.5 / max|w|^0.5`` and the weight's
column multiplied by it, so that the few outlier channels of a transformer's
activations no longer set every row's scale. ``max|x|`` comes from the
built-in calibration texts (never a user's rows). The division is applied at
run time, not folded into the previous LayerNorm, so that it fits any
architecture.

Why this scheme and not PyTorch's dynamic quantization: measured on MiniLM
with 1,000 texts of the Python docs corpus (figures in ``docs/engine.md``),
``quantize_dynamic`` (one activation scale per tensor) reached a minimum
cosine to float32 of 0.82 (per-tensor weights) or 0.91 (per-channel), and
smoothing did not save it (0.88); per-row activations reached 0.985, and with
smoothing 0.996, passing the int8 guard. The integer product is exact, so the
result does not depend on which int8 kernel the CPU has; only the speed does
(see :func:`int8_kernel`).

Speed, measured with MiniLM on a shared 2-core AVX512-VNNI CPU: with one
torch thread int8 ran at 2.3x float32 (bf16 1.7x); with two threads it was
erratic under other processes' load (0.1x to 1.8x): the activation passes
around the integer product are small parallel regions, each waiting for
every thread. Fusing them (``torch.compile``, or folding the smoothing into
the previous LayerNorm) is where more speed, and steadier speed, would come
from.

A model is quantized once per loaded model object and the copy is kept (see
:func:`int8_copy`); the copy shares the tokenizer and every other attribute
of the original, only its networks are new.
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from shardwise.errors import ConfigError
from shardwise.model import Model

__all__ = ["SMOOTHING_ALPHA", "Int8Linear", "int8_copy", "int8_kernel", "linears"]

SMOOTHING_ALPHA = 0.5
"""How much of an input channel's outliers moves from the activation into the weight (SmoothQuant's
alpha): 0 keeps activations as they are, 1 moves all of it."""

_FLOOR = 1e-5
_copies: weakref.WeakKeyDictionary[Any, Model] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


class Int8Linear(nn.Module):
    """A Linear layer in int8: per-channel weights, per-row activations, an optional input smoothing."""

    weight_t: torch.Tensor
    weight_scale: torch.Tensor
    inverse_smooth: torch.Tensor | None
    bias: torch.Tensor | None

    def __init__(self, linear: nn.Linear, smooth: torch.Tensor | None = None) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        if smooth is not None:
            weight = weight * smooth[None, :]
        scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127
        self.register_buffer("weight_t", _round(weight / scale[:, None]).t().contiguous())
        self.register_buffer("weight_scale", scale)
        self.register_buffer("inverse_smooth", None if smooth is None else 1.0 / smooth)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float())
        self.in_features, self.out_features = linear.in_features, linear.out_features

    @property
    def weight(self) -> torch.Tensor:
        """A weight-shaped float32 tensor on the meta device, for code that reads a Linear's weight
        directly: PyTorch's fused ``TransformerEncoderLayer`` fast path sees a tensor off the CPU, so it
        turns itself off and calls this module, rather than run the float weights it would look for."""
        return torch.empty(self.out_features, self.in_features, device="meta")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        # A new tensor either way, so the in-place steps below never touch the caller's x.
        rows = rows * self.inverse_smooth if self.inverse_smooth is not None else rows.float().clone()
        scale = rows.abs().amax(dim=1, keepdim=True).clamp_(min=1e-12).div_(127)
        # |rows / scale| <= 127 by construction, so rounding needs no clamp.
        product = torch._int_mm(rows.div_(scale).round_().to(torch.int8), self.weight_t)
        if self.bias is None:
            out = product.float().mul_(scale * self.weight_scale)
        else:
            out = torch.addcmul(self.bias, product.float(), scale * self.weight_scale)
        return out.reshape(*x.shape[:-1], out.shape[-1])


def _round(values: torch.Tensor) -> torch.Tensor:
    return values.round().clamp(-127, 127).to(torch.int8)


def int8_copy(model: Model, calibrate: Callable[[Model], object]) -> Model:
    """``model`` with every Linear of its networks in int8, made once per model object.

    ``calibrate(model)`` runs the float32 model over the calibration texts; the
    smoothing scales come from the activations it shows each Linear. A model
    without a Linear layer (a convolutional image model) is refused.
    """
    with _lock:
        found = _copies.get(model)
        if found is None:
            found = _copies[model] = _quantize(model, calibrate)
        return found


def _quantize(model: Model, calibrate: Callable[[Model], object]) -> Model:
    # Normal tensors even when called under inference_mode: the copy outlives that context.
    with torch.inference_mode(False), torch.no_grad():
        return _quantized(model, calibrate)


def _quantized(model: Model, calibrate: Callable[[Model], object]) -> Model:
    networks = {name: value for name, value in vars(model).items() if isinstance(value, nn.Module)}
    layers = [(f"{name}.{sub}", mod) for name, net in networks.items() for sub, mod in linears(net)]
    if not layers:
        raise ConfigError(
            f"model {model.name!r} has no Linear layers, so int8 has nothing to quantize; "
            "use --precision fp32, bf16 or auto"
        )
    peaks = _input_peaks(model, dict(layers), calibrate)
    quantized = copy.copy(model)
    for name, net in networks.items():
        twin = copy.deepcopy(net)
        for sub, linear in linears(twin):
            weight_peak = linear.weight.detach().abs().amax(dim=0).clamp(min=_FLOOR)
            activation_peak = peaks[f"{name}.{sub}"].clamp(min=_FLOOR)
            smooth = (activation_peak.pow(SMOOTHING_ALPHA) / weight_peak.pow(1 - SMOOTHING_ALPHA)).clamp(
                min=_FLOOR
            )
            _replace(twin, sub, Int8Linear(linear, smooth))
        setattr(quantized, name, twin)
    return quantized


def linears(net: nn.Module) -> list[tuple[str, nn.Linear]]:
    """The Linear layers that run as modules; ``nn.MultiheadAttention`` reads its output projection's
    weight itself, so that one stays float32 (as in PyTorch's own dynamic quantization)."""
    fused = nn.modules.linear.NonDynamicallyQuantizableLinear
    return [
        (name, mod)
        for name, mod in net.named_modules()
        if isinstance(mod, nn.Linear) and not isinstance(mod, fused)
    ]


def _input_peaks(
    model: Model, layers: dict[str, nn.Linear], calibrate: Callable[[Model], object]
) -> dict[str, torch.Tensor]:
    """The largest absolute input each layer saw, per input channel, over the calibration texts."""
    peaks: dict[str, torch.Tensor] = {}

    def observe(name: str) -> Callable[[nn.Module, tuple[torch.Tensor, ...]], None]:
        def hook(_module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
            seen = inputs[0].detach().float().reshape(-1, inputs[0].shape[-1]).abs().amax(dim=0)
            peaks[name] = torch.maximum(peaks[name], seen) if name in peaks else seen

        return hook

    handles = [layer.register_forward_pre_hook(observe(name)) for name, layer in layers.items()]
    try:
        calibrate(model)
    finally:
        for handle in handles:
            handle.remove()
    # A layer the calibration never reached keeps its activations unsmoothed.
    return {name: peaks.get(name, torch.ones(layer.in_features)) for name, layer in layers.items()}


def _replace(root: nn.Module, name: str, new: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, leaf, new)


def int8_kernel(flags: Sequence[str] | frozenset[str]) -> str:
    """Which int8 instructions a CPU with ``flags`` (``/proc/cpuinfo`` names) offers, best first:
    ``amx-int8``, ``avx512-vnni``, ``avx-vnni``, else ``none`` (int8 products emulated: slower)."""
    for flag, name in (("amx_int8", "amx-int8"), ("avx512_vnni", "avx512-vnni"), ("avx_vnni", "avx-vnni")):
        if flag in flags:
            return name
    return "none"
