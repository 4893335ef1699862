"""A run's parameters resolved once: its :class:`~shardwise.pipeline.RunSpec`, its fan-out, and the checks
that need neither the ledger nor the model (the ``--where`` policy, whether the workers can reach the data);
after the command line's checks, the model's description too.

The command line resolves the parameters before it starts the flow run (:func:`~flows.launch.preflight`)
and hands them over: the flow, running in the same process, takes them instead of resolving again (an
existing Dask or Ray cluster is then asked its size once, not twice, and the model is described once).
A flow run started elsewhere (the UI, a trigger, a deployment's worker) finds nothing handed over and
resolves its parameters itself. A hand-over is taken once, and kept a few minutes at most: a later run
with the same parameters (``shardwise serve`` runs the same form again hours later) resolves afresh,
against the cluster as it is then.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from shardwise.flows.params import ScoreParams
from shardwise.flows.where_policy import refuse_forbidden_where
from shardwise.model import ModelInfo
from shardwise.pipeline.spec import RunSpec
from shardwise.tasks.connections import resolve
from shardwise.tasks.runners import Fanout

__all__ = ["ResolvedRun", "check_resolved", "hand_over", "held_spec", "resolve_run", "take_resolved"]

KEEP_S = 300.0
"""Seconds a hand-over waits for its flow run; a preflight whose flow never started is forgotten then."""
_MAX_HELD = 8


@dataclass(frozen=True)
class ResolvedRun:
    """The run the parameters describe, checked: the spec and the fan-out its shards go to."""

    spec: RunSpec
    fanout: Fanout
    model: ModelInfo | None = None
    """The model's description, when the checks before the run made it (planning then uses it)."""
    at: float = field(default_factory=time.monotonic, compare=False)


def resolve_run(params: ScoreParams) -> ResolvedRun:
    """Resolve ``params``: refuse a forbidden ``--where``, build the spec and the fan-out (asking an existing
    cluster its size), and refuse data the workers could not reach. Raises the first refusal."""
    spec, fanout = params.to_spec(), params.fanout_plan()
    refuse_forbidden_where(getattr(spec.source.kind_options().get("sql"), "where", None))
    fanout.check_reachable(spec, resolve)
    return ResolvedRun(spec, fanout)


def check_resolved(resolved: ResolvedRun, *, dry_run: bool) -> tuple[ResolvedRun, str | None]:
    """Every check a run can fail before anything is recorded (:func:`~shardwise.pipeline.check_run`): the
    run with its model described, and why it would have nothing to do when that is known already."""
    from shardwise.models import get_spec
    from shardwise.pipeline import check_run

    spec, remote = resolved.spec, resolved.fanout.remote
    checked = check_run(spec, resolve, get_spec, local_workers=not remote, dry_run=dry_run)
    return dataclasses.replace(resolved, model=checked.model), checked.idle


_held: OrderedDict[str, ResolvedRun] = OrderedDict()
_lock = threading.Lock()


def hand_over(params: ScoreParams, resolved: ResolvedRun) -> None:
    """Keep ``resolved`` for the flow run of ``params`` that this process is about to start."""
    with _lock:
        _held[params.model_dump_json()] = resolved
        while len(_held) > _MAX_HELD:
            _held.popitem(last=False)


def held_spec(params: ScoreParams) -> RunSpec:
    """The spec handed over for ``params`` (left for its flow run to take), else the one they give."""
    with _lock:
        held = _held.get(params.model_dump_json())
    return params.to_spec() if held is None else held.spec


def take_resolved(params: ScoreParams) -> ResolvedRun:
    """What was handed over for ``params`` in this process (once, within :data:`KEEP_S`), else ``params``
    resolved now."""
    with _lock:
        held = _held.pop(params.model_dump_json(), None)
    if held is not None and time.monotonic() - held.at <= KEEP_S:
        return held
    return resolve_run(params)
