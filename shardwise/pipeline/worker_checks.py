"""What a worker checks before it scores: the model version, outputs and precision the run recorded.

Before scoring, the worker checks that the model it loaded has the version
the run recorded: a worker on another image or checkpoint refuses with a
:class:`~shardwise.errors.ConfigError` instead of writing results under the wrong version. A
loaded model must also write the outputs its ``describe()`` declared, which
the results table was made from.

Each worker runs its run's precision, checks that its device supports it,
and runs the accuracy guard once per process before its first shard (see
:mod:`shardwise.pipeline.run_precision`).
"""

from __future__ import annotations

from typing import Protocol

from shardwise.errors import ConfigError
from shardwise.model import Loaded, ModelInfo
from shardwise.pipeline.shard import this_worker
from shardwise.pipeline.spec import RunSpec
from shardwise.precision import Precision, resolve_precision, versioned
from shardwise.precision.guard import minimum_agreement, shown
from shardwise.records import RunRecord

__all__ = ["Agreements", "check_outputs", "check_precision", "check_version"]


class Agreements(Protocol):
    """Where a worker's guard figures come from (its :class:`~shardwise.pipeline.worker.WorkerCache`)."""

    def agreement(self, model: Loaded, precision: Precision, pairs: bool = False) -> float: ...


def check_version(record: RunRecord, model: Loaded) -> None:
    """The loaded model is the version the run was planned with (its precision included)."""
    if versioned(model.version, record.precision) != record.model_version:  # type: ignore[arg-type]
        raise ConfigError(
            f"worker {this_worker().worker} loaded model {model.name!r} version {model.version[:12]}, but "
            f"run {record.run_id!r} was planned with version {record.model_version[:12]}; give every "
            "worker the same model files (the same image or checkpoint) as the process that planned it"
        )


def check_outputs(model: Loaded, described: ModelInfo) -> None:
    """The loaded model writes the columns its description promised: the results table was made from those."""
    if tuple(model.outputs) != described.outputs:
        raise ConfigError(
            f"model {model.name!r} loaded with outputs {model.outputs!r}, but its describe() gave "
            f"{described.outputs!r}; make the model's load() and describe() declare the same outputs"
        )


def check_precision(record: RunRecord, model: Loaded, spec: RunSpec, cache: Agreements) -> None:
    """This worker's device computes the run's precision, and the guard holds here too."""
    precision = resolve_precision(record.precision, model.device)
    if precision == "fp32":
        return
    found = cache.agreement(model, precision, pairs=spec.source.text_pair_column is not None)
    least = minimum_agreement(precision, spec.run.min_agreement)
    if found < least:
        raise ConfigError(
            f"on worker {this_worker().worker} ({model.device}) model {model.name!r} in {precision} agrees "
            f"with float32 to {shown(found)}, below the minimum {least}; run {record.run_id!r} was "
            "planned in that precision, so start a new run with --precision fp32"
        )
