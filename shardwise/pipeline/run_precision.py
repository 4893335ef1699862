"""A run's precision, chosen once where it is planned: the hardware's choice, checked by the accuracy guard.

``auto`` takes the fastest precision the device computes natively
(:func:`~shardwise.precision.resolve_precision`), then the guard compares it
with float32 on a few calibration texts; below ``spec.run.min_agreement`` (or
the precision's default, :func:`~shardwise.precision.guard.minimum_agreement`) an
``auto`` run falls back to float32 (with a warning), an explicit one is
refused. The model the guard needs is loaded into the process's
:class:`~shardwise.pipeline.worker.WorkerCache`, where the shards of a
thread runner find it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from shardwise.batch.device import resolve_device
from shardwise.errors import ConfigError
from shardwise.model import ModelInfo
from shardwise.pipeline.spec import RunSpec
from shardwise.pipeline.worker import WorkerCache
from shardwise.precision import Precision, has_labels, resolve_precision
from shardwise.precision.guard import minimum_agreement, shown

__all__ = ["PrecisionChoice", "choose_precision", "hardware_precision", "warm"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrecisionChoice:
    """A run's precision, and the guard's measured agreement (None where nothing was measured).

    fp32 with an agreement means ``auto`` fell back: the figure is the
    reduced precision's, which failed the guard.
    """

    precision: Precision
    agreement: float | None = None
    cached: bool = False
    """The agreement was read from the calibration cache, not measured by this run."""


def hardware_precision(spec: RunSpec, model: ModelInfo) -> tuple[Precision, torch.device]:
    """The precision ``spec`` asks for on the device its policy gives here, for ``model``, before any
    guard (label outputs keep ``auto`` in float32; a model that batches by itself computes in its own
    precision, so ``auto`` is float32 and a reduced one is refused).

    Also returns the device the guard measures on. A ``cuda`` policy seen
    from a host without CUDA (a CPU-only process planning for GPU workers)
    takes bf16 for ``auto``, what every GPU since Ampere computes natively,
    and is measured on the CPU: the guard checks the model's tolerance of the
    format, which is the same on either device.
    """
    outputs = model.outputs
    if model.batches_itself:
        if spec.run.precision not in ("auto", "fp32"):
            raise ConfigError(
                f"precision {spec.run.precision} is Shardwise's cast of a model it batches, and model "
                f"{model.name!r} computes in its own precision (vLLM's: --engine-option dtype=bfloat16; an "
                "endpoint's: the server's); drop --precision"
            )
        outputs = ()  # no cast to choose: fp32 below
    try:
        device = resolve_device(spec.run.device)
    except ConfigError:
        if not spec.run.device.startswith("cuda"):
            raise
        requested = spec.run.precision
        if requested == "int8":  # refused here, not by each GPU worker after the run is recorded
            resolve_precision(requested, torch.device("cuda"))
        if requested == "auto":
            requested = "fp32" if has_labels(outputs) or model.batches_itself else "bf16"
        return requested, torch.device("cpu")  # type: ignore[return-value]
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())  # the key a leased shard uses
    if model.batches_itself:
        return "fp32", device
    return resolve_precision(spec.run.precision, device, outputs), device


def warm(spec: RunSpec, cache: WorkerCache) -> None:
    """Load the model a run of ``spec`` needs here, and run its precision guard, ahead of planning.

    Whoever starts a run in this process can call it on a thread while the
    orchestrator starts up; planning and the shards then find both in ``cache``.
    """
    precision, device = hardware_precision(spec, cache.info(spec.model))
    model, _ = cache.model(spec.model, device, spec.run.retry)
    if precision != "fp32":
        cache.agreement(model, precision, pairs=spec.source.text_pair_column is not None)


def choose_precision(spec: RunSpec, cache: WorkerCache) -> PrecisionChoice:
    """The precision a new run of ``spec`` records: the hardware's choice, checked by the accuracy guard."""
    precision, device = hardware_precision(spec, cache.info(spec.model))
    if precision == "fp32":
        return PrecisionChoice("fp32")
    model, _ = cache.model(spec.model, device, spec.run.retry)
    found, cached = cache.guarded(model, precision, pairs=spec.source.text_pair_column is not None)
    least = minimum_agreement(precision, spec.run.min_agreement)
    if found >= least:
        return PrecisionChoice(precision, found, cached)
    if spec.run.precision == "auto":
        _log.warning(
            "model %r in %s agrees with float32 to %.5f on %s, below the minimum %s: scoring in fp32",
            spec.model.name,
            precision,
            found,
            device,
            least,
        )
        return PrecisionChoice("fp32", found, cached)
    raise ConfigError(
        f"model {spec.model.name!r} in {precision} agrees with float32 to {shown(found)} on {device} "
        f"(worst of its calibration texts), below the minimum {least}; use --precision fp32, bf16 or auto "
        "(which falls back to fp32), or lower --min-agreement"
    )
