"""Where a host keeps what it learns between runs: ``~/.shardwise``, read by the flow and by every worker.

``SHARDWISE_HOME`` moves it. It holds ``calibration.json``, the precision
guard's figures (see :mod:`shardwise.precision.calibration`): delete it to have the next
run measure again; nothing else depends on it. And ``converted/``, models converted
once to load fast afterwards (a GGUF file de-quantised, see
:mod:`shardwise.model.converted`), at most ``SHARDWISE_CONVERTED_MAX_GB`` GiB (default 8;
0 keeps none), least recently used first out; ``shardwise cache list`` and
``shardwise cache clear`` show and empty it.

The flow's process and each worker process (the process pool's, Dask's,
Ray's, a per-shard flow run's) :func:`equip` their cache from it, so that a
worker on this host neither measures the guard's figures nor converts a GGUF
file again; a worker on another host reads its own host's home.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from shardwise.errors import ConfigError
from shardwise.model.converted import DEFAULT_MAX_BYTES, ConvertedCache
from shardwise.precision.calibration import CalibrationCache

if TYPE_CHECKING:
    from shardwise.pipeline.worker import WorkerCache

__all__ = ["CONVERTED_MAX_GB", "HOME", "calibration_cache", "converted_cache", "equip", "shardwise_home"]

CONVERTED_MAX_GB = "SHARDWISE_CONVERTED_MAX_GB"
"""The environment variable that bounds the converted models' folder, in GiB (0: keep none)."""

HOME = "SHARDWISE_HOME"
"""The environment variable that moves the folder."""


def shardwise_home() -> Path:
    """``$SHARDWISE_HOME``, else ``~/.shardwise``."""
    return Path(os.environ.get(HOME) or Path.home() / ".shardwise").expanduser()


def calibration_cache() -> CalibrationCache:
    """The precision guard's figures of this host, kept between runs."""
    return CalibrationCache(shardwise_home() / "calibration.json")


def converted_bound() -> int:
    """The converted models' bound in bytes, from ``$SHARDWISE_CONVERTED_MAX_GB`` (0: keep none)."""
    given = os.environ.get(CONVERTED_MAX_GB)
    if given is None or not given.strip():
        return DEFAULT_MAX_BYTES
    try:
        gib = float(given)
    except ValueError:
        gib = -1.0
    if not gib >= 0 or gib == float("inf"):
        raise ConfigError(
            f"{CONVERTED_MAX_GB}={given!r} is not a size in GiB; give a number of at least 0 "
            "(0 keeps no converted model), or unset it for the default of 8"
        )
    return int(gib * 2**30)


def converted_cache() -> ConvertedCache | None:
    """Where models converted to load fast (a GGUF file de-quantised) are kept between runs; None when
    the bound is 0."""
    bound = converted_bound()
    return ConvertedCache(shardwise_home() / "converted", bound) if bound > 0 else None


def equip(worker: WorkerCache) -> None:
    """Give ``worker`` what this host keeps between runs: the guard's figures and converted models."""
    worker.calibration = calibration_cache()
    worker.converted = converted_cache()
