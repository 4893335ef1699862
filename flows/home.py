"""Where the command line and the flows keep what a host learns between runs: ``~/.shardwise``.

``SHARDWISE_HOME`` moves it. It holds ``calibration.json``, the precision
guard's figures (see :mod:`shardwise.precision.calibration`): delete it to have the next
run measure again; nothing else depends on it.
"""

from __future__ import annotations

import os
from pathlib import Path

from shardwise.precision.calibration import CalibrationCache

__all__ = ["HOME", "calibration_cache", "shardwise_home"]

HOME = "SHARDWISE_HOME"
"""The environment variable that moves the folder."""


def shardwise_home() -> Path:
    """``$SHARDWISE_HOME``, else ``~/.shardwise``."""
    return Path(os.environ.get(HOME) or Path.home() / ".shardwise").expanduser()


def calibration_cache() -> CalibrationCache:
    """The precision guard's figures of this host, kept between runs."""
    return CalibrationCache(shardwise_home() / "calibration.json")
