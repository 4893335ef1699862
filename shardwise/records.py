"""The records the pipeline hands to the results store: runs, scored rows, dead letters, shard reports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from shardwise.sources.base import Key

__all__ = ["DeadLetter", "ResultRow", "RunRecord", "ShardReport"]

RunStatus = Literal["running", "completed", "failed"]


@dataclass(frozen=True)
class RunRecord:
    """One row of ``shardwise_runs``: who started what, with which model, code and input."""

    run_id: str
    """The Prefect flow-run id (or a uuid when the engine runs without Prefect)."""
    started_by: str
    """``manual``, ``schedule``, ``cli`` or ``event:<event id>``."""
    parameters: Mapping[str, Any]
    """The run's parameters as JSON-able values, secrets already removed."""
    model_name: str
    model_version: str
    """The version that keys results: the weights hash, with ``+bf16``/``+fp16``/``+int8`` for a reduced
    precision."""
    code_version: str
    source_identity: str
    source_snapshot: str | None
    results_table: str
    precision: str = "fp32"
    """What the model computed in (see :mod:`shardwise.precision`)."""
    precision_agreement: float | None = None
    """The accuracy guard's agreement with float32 when it was measured (reduced precision, or a fallback)."""
    precision_agreement_from: str | None = None
    """``measured`` by this run, or read from the calibration ``cache`` (an earlier identical measurement)."""


@dataclass(frozen=True, slots=True)
class ResultRow:
    """One scored row. ``values`` maps each model output column to its value (a float32 vector...)."""

    key: Key
    values: Mapping[str, Any]
    input_fingerprint: str
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A row that could not be scored, and why. ``key`` is None only when the key itself was unreadable."""

    key: Key | None
    error_class: str
    message: str
    input_fingerprint: str | None = None


@dataclass(frozen=True)
class ShardReport:
    """What one shard attempt did; stored in ``shardwise_shards`` when the shard is marked done."""

    attempt: int
    rows_in: int
    rows_out: int
    rows_failed: int
    started_at: datetime
    finished_at: datetime
    host: str
    device: str
    engine: Mapping[str, Any] = field(default_factory=dict)
    """``EngineStats.as_dict()``: padding efficiency, tokens/s, OOM splits, wait and compute time."""
    input_snapshot: str | None = None
    """The snapshot this shard was actually read at, when it differs from the run's (a lost snapshot)."""
