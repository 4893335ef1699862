"""The accuracy guard: how closely a model in a reduced precision matches itself in float32.

:func:`agreement` scores the built-in calibration texts
(:mod:`shardwise.precision.calibration_texts`) in float32 and in the reduced precision,
through the model's own ``prepare`` and ``collate``, and returns the worst
cosine (vector outputs) or the share of equal values (labels, integers);
float outputs count as equal within 1e-2 relative. A run refuses a precision
whose agreement is under :func:`minimum_agreement` (see
:mod:`shardwise.precision` for how a precision is chosen).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shardwise.model import SelfBatching
from shardwise.precision import Precision, autocast, for_precision
from shardwise.precision.calibration_texts import calibration_items

if TYPE_CHECKING:
    import numpy as np

    from shardwise.model import Loaded

__all__ = [
    "DEFAULT_MIN_AGREEMENT",
    "INT8_MIN_AGREEMENT",
    "Calibration",
    "agreement",
    "calibrate",
    "minimum_agreement",
    "shown",
]

DEFAULT_MIN_AGREEMENT = 0.999
"""The guard's default threshold for bf16 and fp16: minimum cosine to float32 (or share of equal labels)."""
INT8_MIN_AGREEMENT = 0.99
"""The guard's default threshold for int8: int8 rounds far more coarsely than bf16 (see
:mod:`shardwise.precision`), and below a cosine of 0.99 nearest neighbours visibly change."""


def minimum_agreement(precision: Precision, given: float | None = None) -> float:
    """The guard's threshold for ``precision``: ``given`` when set, else the precision's default."""
    if given is not None:
        return given
    return INT8_MIN_AGREEMENT if precision == "int8" else DEFAULT_MIN_AGREEMENT


def shown(found: float) -> str:
    """An agreement for a message, rounded down to 5 decimals: 0.999996 below a minimum of 1.0 reads
    0.99999, never 1.00000."""
    return f"{math.floor(found * 1e5) / 1e5:.5f}"


@dataclass(frozen=True)
class Calibration:
    """One pass of the guard: its agreement, and how fast each precision scored the calibration batch
    (the items' cost, in the model's unit (tokens, pixels), per second of scoring and copying back to the
    host: a short measured figure a plan turns into device-hours)."""

    agreement: float
    cost_per_s: Mapping[Precision, float] = field(default_factory=dict)


def agreement(model: Loaded, precision: Precision, pairs: bool = False) -> float:
    """How closely ``model`` in ``precision`` matches itself in float32 on calibration texts (1.0 = equal):
    :func:`calibrate`'s agreement."""
    return calibrate(model, precision, pairs).agreement


def calibrate(model: Loaded, precision: Precision, pairs: bool = False) -> Calibration:
    """Score the calibration texts in float32 and in ``precision``: their agreement, and each pass's speed.

    The texts go through the model's own ``prepare`` and ``collate``, as a
    run's rows do; with ``pairs`` they are scored as pairs of neighbours, as a
    pair model's rows are. Vector outputs give the minimum cosine over rows;
    other outputs the share of rows whose values are equal (floats within
    1e-2 relative). The worst output column counts. Nothing runs for fp32 or a
    model that batches by itself (agreement 1.0, no speed).
    """
    if precision == "fp32" or isinstance(model, SelfBatching):
        return Calibration(1.0)  # a model that batches by itself computes as it chooses: nothing to compare
    # Imported here: the thresholds above are read by the flow's parameters, which --help builds
    # without torch.
    import numpy as np
    import torch

    from shardwise.batch.device import to_host

    items = calibration_items(model, pairs)
    cost = sum(item.cost for item in items)
    batch = model.collate(items).to(model.device)
    reduced_model = for_precision(model, precision)
    with torch.inference_mode():
        started = time.perf_counter()
        full = model.to_columns(to_host(model.run(batch)))  # to_host waits for the device: timed whole
        full_s = time.perf_counter() - started
        started = time.perf_counter()
        with autocast(model.device, precision):
            reduced_out = reduced_model.run(batch)
        reduced = model.to_columns(to_host(reduced_out))
        reduced_s = time.perf_counter() - started
    worst = 1.0
    for out in model.outputs:
        a, b = np.asarray(full[out.name]), np.asarray(reduced[out.name])
        worst = min(worst, _agree(a, b, out.kind))
    speeds: dict[Precision, float] = {
        "fp32": cost / max(full_s, 1e-9),
        precision: cost / max(reduced_s, 1e-9),
    }
    return Calibration(worst, speeds)


def _agree(full: np.ndarray, reduced: np.ndarray, kind: str) -> float:
    import numpy as np

    if kind == "vector":
        a, b = full.astype(np.float64), reduced.astype(np.float64)
        norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
        cos = np.where(norms > 0, (a * b).sum(axis=1) / np.where(norms > 0, norms, 1.0), 1.0)
        return float(cos.min())
    if kind == "float":
        same = np.isclose(reduced.astype(np.float64), full.astype(np.float64), rtol=1e-2, atol=1e-6)
        return float(same.mean())
    return float((full == reduced).mean())
