"""Shardwise: batch inference over tables.

This package is the engine. It never imports an orchestrator: the Prefect
tasks in ``tasks/`` and the flows in ``flows/`` wrap it.
"""

from __future__ import annotations

from shardwise.config import EngineConfig
from shardwise.device import resolve_device
from shardwise.engine import Engine, EngineRun, RowResult
from shardwise.errors import (
    ConfigError,
    DeviceOutOfMemoryError,
    InputError,
    ShardwiseError,
    SourceError,
    TransientError,
    UnknownModelError,
)
from shardwise.model import Encoding, Model, ModelSpec, OutputColumn
from shardwise.stats import BatchStats, EngineStats

__version__ = "0.1.0"

__all__ = [
    "BatchStats",
    "ConfigError",
    "DeviceOutOfMemoryError",
    "Encoding",
    "Engine",
    "EngineConfig",
    "EngineRun",
    "EngineStats",
    "InputError",
    "Model",
    "ModelSpec",
    "OutputColumn",
    "RowResult",
    "ShardwiseError",
    "SourceError",
    "TransientError",
    "UnknownModelError",
    "__version__",
    "resolve_device",
]
