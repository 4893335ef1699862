"""Shardwise: batch inference over tables.

This package is the engine. It never imports an orchestrator: the Prefect
tasks in ``tasks/`` and the flows in ``flows/`` wrap it.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from shardwise.config import EngineConfig
from shardwise.device import resolve_device
from shardwise.engine import Engine, EngineRun, RowResult
from shardwise.errors import (
    ConfigError,
    DeviceOutOfMemoryError,
    InputError,
    RetryDeadlineError,
    RunTakenOverError,
    ShardwiseError,
    SourceError,
    TransientError,
    UnknownModelError,
)
from shardwise.model import DeviceBatch, Encoding, Item, Model, ModelSpec, OutputColumn
from shardwise.retry_policy import RetryPolicy
from shardwise.stats import BatchStats, EngineStats

try:
    __version__ = _version("shardwise")
    """The installed distribution's version: pyproject.toml is its one home."""
except PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"

__all__ = [
    "BatchStats",
    "ConfigError",
    "DeviceBatch",
    "DeviceOutOfMemoryError",
    "Encoding",
    "Engine",
    "EngineConfig",
    "EngineRun",
    "EngineStats",
    "InputError",
    "Item",
    "Model",
    "ModelSpec",
    "OutputColumn",
    "RetryDeadlineError",
    "RetryPolicy",
    "RowResult",
    "RunTakenOverError",
    "ShardwiseError",
    "SourceError",
    "TransientError",
    "UnknownModelError",
    "__version__",
    "resolve_device",
]
