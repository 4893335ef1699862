"""Which floating-point precision a model runs in, and how it is chosen.

``auto`` picks the fastest precision the device computes natively:

* **CUDA**: ``bf16`` where the GPU supports it (Ampere and later), else
  ``fp16`` (tensor cores since Volta), else ``fp32``.
* **CPU**: ``bf16`` where the CPU has native bf16 instructions (AMX-BF16 or
  AVX512-BF16; about 2-3x float32 on a small encoder), else ``fp32``: on older
  CPUs bf16 is emulated and slower than float32. ``fp16`` is refused on a CPU,
  even when asked for: it is accurate there, but emulated (only AMX-FP16 parts
  compute it natively) and slow. MiniLM under fp16 autocast on a 2-core
  AVX512-BF16 CPU (torch 2.13) agreed with float32 to a cosine of 0.999999, and
  took 3.7 times as long as fp32 and 6 times as long as bf16.
* **int8** (CPU only, never chosen by ``auto``): a copy of the model whose
  Linear layers compute in int8 (:mod:`shardwise.precision.quantize`: per-row
  activations, per-channel weights, SmoothQuant-style smoothing calibrated on
  the built-in texts). It moves embeddings further than bf16 does (MiniLM's
  minimum cosine to float32 about 0.996 on 1,000 texts, against 0.99994 for
  bf16), and its speed-up is erratic on a busy multi-threaded CPU, so it is
  only ever an explicit choice, behind its own guard minimum
  (:data:`~shardwise.precision.guard.INT8_MIN_AGREEMENT`, 0.99). On CUDA it is refused: use bf16.
* **Label outputs**: a model with a ``text`` or ``int`` output (a classifier's
  ``label``) stays in ``fp32`` under ``auto``, on any device. A label is a step
  function of the logits: reduced precision moves the logits a little, which
  flips exactly the rows near a tie, and the few calibration texts cannot
  vouch for rows they do not contain. Ask for ``bf16`` explicitly to trade
  that for speed; the guard still checks it.

Reduced floating precision runs under ``torch.autocast``: matrix products in bf16 or
fp16, normalisations and softmax in float32. The loaded model keeps its float32
weights and serves float32 runs and the guard's reference; bf16 and fp16 run a
copy of it whose Linear weights are stored cast, so autocast need not cast them
on every pass (:mod:`shardwise.precision.cast_copy`), and int8 a quantized copy; each copy
is made once per loaded model (:func:`for_precision`).

Results of different precisions never mix: :func:`versioned` makes the
precision part of the model version that keys the results table (float32 keeps
the bare weights hash, so tables written before precision existed stay valid).

The accuracy guard that checks a reduced precision against float32 is
:mod:`shardwise.precision.guard`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from shardwise.errors import ConfigError
from shardwise.precision.calibration_texts import calibration_items

if TYPE_CHECKING:
    import torch

    from shardwise.model import Model, OutputColumn

__all__ = [
    "Precision",
    "Requested",
    "autocast",
    "check_precision",
    "cpu_has_native_bf16",
    "cpu_int8_kernel",
    "emulated_int8_warning",
    "for_precision",
    "has_labels",
    "resolve_precision",
    "versioned",
]

Requested = Literal["auto", "fp32", "bf16", "fp16", "int8"]
Precision = Literal["fp32", "bf16", "fp16", "int8"]

# torch is imported by the functions that run or probe a device, not here: the CLI and the flow's
# parameters check a precision's name, and must not pay torch's import (1-3 s) to print --help.


def _dtype(precision: Precision) -> torch.dtype:
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AMX-BF16 or AVX512-BF16)."""
    import torch

    probes = [getattr(torch.cpu, n, None) for n in ("_is_amx_tile_supported", "_is_avx512_bf16_supported")]
    try:
        if any(probe is not None and probe() for probe in probes):
            return True
    except RuntimeError:
        pass  # a torch build without these probes: read the CPU flags instead
    return bool(_cpu_flags() & {"amx_bf16", "avx512_bf16"})


@functools.cache
def _cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_int8_kernel() -> str:
    """The int8 instructions this CPU offers (``amx-int8``, ``avx512-vnni``, ``avx-vnni`` or ``none``)."""
    from shardwise.precision.quantize import int8_kernel

    return int8_kernel(_cpu_flags())


def emulated_int8_warning(precision: str) -> str | None:
    """The warning for an int8 run on a CPU without int8 instructions, else None.

    Without VNNI or AMX, PyTorch's int8 matrix product falls back to a plain
    loop: on a 2-core AVX2 CPU (torch 2.13) ``torch._int_mm`` took 30 to 60
    times as long as the float32 product of the same shape. The run is still
    correct (the product is exact), so it is a warning, not a refusal; the
    CPU is the planning host's, as in the plan's log line.
    """
    if precision != "int8" or cpu_int8_kernel() != "none":
        return None
    return (
        "this CPU has no int8 instructions (AVX512-VNNI, AVX-VNNI or AMX-INT8), so int8 matrix products "
        "are emulated, tens of times slower than fp32; use --precision fp32 or auto here, and int8 on a "
        "CPU that has them"
    )


def _cuda_native(device: torch.device) -> tuple[Precision, ...]:
    import torch

    major, _ = torch.cuda.get_device_capability(device)
    if major >= 8:
        return ("bf16", "fp16", "fp32")
    return ("fp16", "fp32") if major >= 7 else ("fp32",)


def native(device: torch.device) -> tuple[Precision, ...]:
    """Precisions ``device`` computes natively, fastest first."""
    if device.type == "cuda":
        return _cuda_native(device)
    return ("bf16", "fp32") if cpu_has_native_bf16() else ("fp32",)


def check_precision(value: object) -> Requested:
    """``value`` as a requested precision, or a :class:`ConfigError` naming the choices."""
    if value not in get_args(Requested):
        raise ConfigError(
            f"precision must be one of {', '.join(get_args(Requested))}; got {value!r}. "
            "auto picks the fastest the device computes natively"
        )
    return value  # type: ignore[return-value]


def has_labels(outputs: Sequence[OutputColumn]) -> bool:
    """Whether any output is discrete (``text``, ``int`` or ``json``), so that ``auto`` keeps float32."""
    return any(out.kind in ("text", "int", "json") for out in outputs)


def resolve_precision(
    requested: str, device: torch.device, outputs: Sequence[OutputColumn] = ()
) -> Precision:
    """The precision to run ``requested`` in on ``device``, for a model with ``outputs``.

    ``auto`` gives the fastest native one, or fp32 for a model with label
    outputs (see the module docstring). An explicit choice is kept where
    the device can compute it at all: bf16 on a CPU without native bf16 is
    slow but correct, so it is allowed; bf16 on a GPU that lacks it, and
    fp16 on a CPU (several times slower than fp32: see the module docstring),
    are refused with the fix. ``int8`` runs on CPUs only, on any of them
    (emulated and tens of times slower without VNNI or AMX, which a run warns
    of: see :func:`emulated_int8_warning`).
    """
    choice = check_precision(requested)
    if choice == "auto":
        return "fp32" if has_labels(outputs) else native(device)[0]
    if choice == "fp32":
        return "fp32"
    if choice == "int8" and device.type != "cpu":
        raise ConfigError(
            f"precision int8 runs on CPUs only, not on {device}; use --precision bf16 or auto there "
            "(or --device cpu for int8)"
        )
    if device.type == "cuda" and choice not in _cuda_native(device):
        import torch

        name = torch.cuda.get_device_name(device)
        raise ConfigError(
            f"precision {choice} is not supported on {device} ({name}); use --precision "
            f"{_cuda_native(device)[0]} or auto"
        )
    if device.type == "cpu" and choice == "fp16":
        raise ConfigError(
            f"precision fp16 is not computed natively on CPUs (on device {device} it would run several "
            f"times slower than fp32); use --precision fp32 or bf16 (or auto, which picks "
            f"{native(device)[0]} here), or --device cuda on a host with a GPU"
        )
    return choice


def versioned(version: str, precision: Precision) -> str:
    """The model version that keys results: the weights hash, plus ``+bf16``/``+fp16``/``+int8`` when
    reduced."""
    return version if precision == "fp32" else f"{version}+{precision}"


def autocast(device: torch.device, precision: Precision) -> contextlib.AbstractContextManager[object]:
    """The context a forward pass runs in for ``precision`` on ``device``."""
    if precision in ("fp32", "int8"):  # int8 is a quantized copy of the model: see for_precision
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=device.type, dtype=_dtype(precision))


def for_precision(model: Model, precision: Precision) -> Model:
    """The model that computes in ``precision``, made once per loaded model: ``model`` itself for fp32,
    its copy with Linear weights cast for bf16 and fp16 (run it under :func:`autocast`; see
    :mod:`shardwise.precision.cast_copy`), its int8 copy for int8 (see
    :mod:`shardwise.precision.quantize`)."""
    if precision == "fp32":
        return model
    if precision == "int8":
        from shardwise.precision.quantize import int8_copy

        return int8_copy(model, _calibrate)
    from shardwise.precision.cast_copy import cast_copy

    return cast_copy(model, _dtype(precision))


def _calibrate(model: Model) -> None:
    """Run ``model`` in float32 over the calibration texts, for what its layers see."""
    import torch

    batch = model.collate(calibration_items(model, pairs=False)).to(model.device)
    with torch.inference_mode():
        model.run(batch)
