"""The precision guard's measurements, kept in a small JSON file so that later runs on this host reuse them.

The guard (:func:`~shardwise.precision.guard.agreement`) scores its calibration
texts twice, in float32 and in the reduced precision: on two CPU cores a
second or more of every run, for a figure that only changes when something
it depends on changes. Its key holds all of those: the model's name and
version (its weights hash), the precision, whether rows are pairs, the device
and what computes on it (the CPU's model and its vector and matrix flags, or
the GPU's name, compute capability and CUDA version), the versions of torch,
transformers and Shardwise, and a digest of the calibration texts. A change
to any of them is a different key, so a stale figure is never read. A file
that cannot be read or parsed is ignored (and replaced on the next write);
one that cannot be written only costs the next run a measurement.

A pass also times each precision on the calibration batch (its items' cost,
tokens or pixels, per second): stored beside the agreement, under the key of
the precision timed (float32's too), it is what ``shardwise plan`` turns into
device-hours when no earlier run of the model says (:class:`Speed`).

Whoever runs the engine decides where the file lives (the command line uses
``~/.shardwise/calibration.json``); the engine takes the path.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

from shardwise.model import Loaded
from shardwise.precision import Precision
from shardwise.precision.calibration_texts import CALIBRATION_TEXTS
from shardwise.precision.guard import calibrate

__all__ = ["CalibrationCache", "Speed", "calibration_key", "device_identity", "measured_agreement"]

_FORMAT = 1
_MAX_ENTRIES = 256
_CPU_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_fp16",
    "amx_int8",
)
"""The CPU flags that decide which kernels a reduced precision (int8 included) runs on."""


def measured_agreement(
    store: CalibrationCache | None, model: Loaded, precision: Precision, pairs: bool = False
) -> tuple[float, bool]:
    """The guard's agreement of ``model`` in ``precision``, and whether it was read from ``store`` (True)
    or measured now (False, and stored there)."""
    if store is None:
        return calibrate(model, precision, pairs).agreement, False
    key = calibration_key(model, precision, pairs)
    found = store.get(key)
    if found is not None:
        return found, True
    measured = calibrate(model, precision, pairs)
    for timed, cost_per_s in measured.cost_per_s.items():
        if timed != precision:  # float32's speed, timed by the same pass
            store.put(calibration_key(model, timed, pairs), None, cost_per_s)
    store.put(key, measured.agreement, measured.cost_per_s.get(precision))
    return measured.agreement, False


def calibration_key(
    model: Loaded, precision: Precision, pairs: bool, device: torch.device | None = None
) -> dict[str, Any]:
    """Everything the guard's figure for ``model`` in ``precision`` depends on; on ``device`` (default the
    model's: a plan asks for the device its run will take)."""
    return {
        "model": model.name,
        "version": model.version,
        "precision": precision,
        "pairs": pairs,
        "device": device_identity(model.device if device is None else device),
        "torch": torch.__version__,
        "transformers": _version_of("transformers"),
        "shardwise": _version_of("shardwise"),
        "texts": hashlib.sha256("\0".join(CALIBRATION_TEXTS).encode()).hexdigest()[:16],
    }


def device_identity(device: torch.device) -> str:
    """What computes on ``device``: the GPU's name, capability and CUDA version, or the CPU and its flags."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        return f"cuda:{torch.cuda.get_device_name(index)}:sm{major}{minor}:cuda {torch.version.cuda}"
    if device.type == "cpu":
        name, flags = _cpu()
        return f"cpu:{platform.machine()}:{name}:{'+'.join(flags)}"
    return device.type


@functools.cache
def _cpu() -> tuple[str, tuple[str, ...]]:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor(), ()
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in lines if ":" in line)}
    found = set(fields.get("flags", "").split())
    return fields.get("model name", platform.processor()), tuple(f for f in _CPU_FLAGS if f in found)


def _version_of(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


@dataclass(frozen=True)
class Speed:
    """A calibration pass's measured speed: the calibration batch's cost (tokens, pixels) per second, and
    when it was measured (seconds since the epoch)."""

    cost_per_s: float
    measured_at: float


@dataclass(frozen=True)
class CalibrationCache:
    """The guard's figures, one per key, in the JSON file at ``path`` (created on first write)."""

    path: Path

    def get(self, key: dict[str, Any]) -> float | None:
        """The figure stored under ``key``, or None (none stored, or the file unreadable)."""
        entry = self._entries().get(_digest(key))
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        value = entry.get("agreement")
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    def speed(self, key: dict[str, Any]) -> Speed | None:
        """The speed a calibration pass measured under ``key``, or None (none stored, or unreadable)."""
        entry = self._entries().get(_digest(key))
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        rate, at = entry.get("cost_per_s"), entry.get("measured_at")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (rate, at)):
            return None
        return Speed(float(rate), float(at)) if float(rate) > 0 else None  # type: ignore[arg-type]

    def put(self, key: dict[str, Any], agreement: float | None, cost_per_s: float | None = None) -> None:
        """Store ``agreement`` (None: none measured for ``key``) and the speed measured under ``key``,
        replacing the file atomically; an OSError is ignored."""
        entries = self._entries()
        entry: dict[str, Any] = {"key": key, "agreement": agreement, "measured_at": time.time()}
        if cost_per_s is not None:
            entry["cost_per_s"] = cost_per_s
        entries[_digest(key)] = entry
        if len(entries) > _MAX_ENTRIES:  # the oldest measurements go first
            kept = sorted(entries.items(), key=lambda item: item[1].get("measured_at", 0), reverse=True)
            entries = dict(kept[:_MAX_ENTRIES])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=self.path.parent, prefix=".calibration-")
        except OSError:
            return  # a read-only home: the next run measures again
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"format": _FORMAT, "entries": entries}, out, indent=1, sort_keys=True)
            os.replace(temp, self.path)  # readers see the old file or the new one, never half of one
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temp)

    def _entries(self) -> dict[str, Any]:
        try:
            stored = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(stored, dict) or stored.get("format") != _FORMAT:
            return {}
        entries = stored.get("entries")
        return dict(entries) if isinstance(entries, dict) else {}


def _digest(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
