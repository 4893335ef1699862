"""Shardwise: batch inference over tables.

This package is the engine. It never imports an orchestrator: the Prefect
tasks in ``tasks/`` and the flows in ``flows/`` wrap it.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shardwise.batch.config import EngineConfig
    from shardwise.batch.device import resolve_device
    from shardwise.batch.engine import Engine, EngineRun, RowResult
    from shardwise.batch.stats import BatchStats, EngineStats
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

# Imported on first use (PEP 562): ``import shardwise.environment`` or a helper process such as
# ``python -m shardwise.flows.server_guard`` must not pay torch's import (1-3 s on two cores).
_LAZY = {
    "EngineConfig": "shardwise.batch.config",
    "resolve_device": "shardwise.batch.device",
    **dict.fromkeys(("Engine", "EngineRun", "RowResult"), "shardwise.batch.engine"),
    **dict.fromkeys(
        (
            "ConfigError",
            "DeviceOutOfMemoryError",
            "InputError",
            "RetryDeadlineError",
            "RunTakenOverError",
            "ShardwiseError",
            "SourceError",
            "TransientError",
            "UnknownModelError",
        ),
        "shardwise.errors",
    ),
    **dict.fromkeys(
        ("DeviceBatch", "Encoding", "Item", "Model", "ModelSpec", "OutputColumn"), "shardwise.model"
    ),
    "RetryPolicy": "shardwise.retry_policy",
    **dict.fromkeys(("BatchStats", "EngineStats"), "shardwise.batch.stats"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'shardwise' has no attribute {name!r}")


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
