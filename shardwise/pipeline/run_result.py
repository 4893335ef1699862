"""What one invocation of a run did, typed: the ``score`` flow's return value, read by the command line's
closing lines, the run's artifacts and its finished event.

It lives in the pipeline, not beside the ledger's
:class:`~shardwise.results.RunSummary`: that is what the ledger stores about a
run, across every invocation, while a :class:`RunResult` is what this
invocation did, summed from its :class:`~shardwise.pipeline.ShardOutcome`\\ s
and its :class:`~shardwise.pipeline.PlannedRun` (the merge split, the engine's
rates, the workers it used) with the ledger's whole-run counts beside them.
The ledger sits below the pipeline and cannot know those. Like the rest of the
engine it never imports Prefect: the flow builds it with
:func:`run_result`, and plain data leaves it at one seam,
:meth:`RunResult.event_payload`, for the JSON of the finished event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from shardwise.batch.stats import EngineStats
from shardwise.cost.budget import Budget, past_budget
from shardwise.pipeline.skipped import Skipped
from shardwise.results import RunCounts

if TYPE_CHECKING:
    from shardwise.pipeline.prepare import PlannedRun
    from shardwise.pipeline.shard import ShardOutcome

__all__ = [
    "PAYLOAD_KEYS",
    "EngineFigures",
    "FanoutUsed",
    "InvocationCounts",
    "LeaseHeld",
    "MergeTotals",
    "PrecisionUsed",
    "RunResult",
    "ShardTally",
    "run_result",
]

PAYLOAD_KEYS = (
    "run_id",
    "status",
    "results_table",
    "model",
    "model_version",
    "rows_in",
    "rows_out",
    "rows_failed",
    "rows_skipped",  # neither scored nor dead-lettered: a NULL key, or already scored (pipeline/skipped.py)
    "inserted",
    "updated",
    "unchanged",
    "shards_total",
    "shards_done",
    "shards_failed",
    "counts",  # the whole run's count outputs (completion_tokens, prompt_tokens); {} for an encoder
    "cost_usd",  # the whole run's dollars (None: not priced), for an automation to alert on
    "device_seconds",
    "usage",  # the whole run's rows, tokens, device seconds by kind, cost, $/1k rows, $/1M tokens
    "stopped",  # "budget": its shards stopped at its --budget-usd (status failed; resume goes on); else None
)
"""The keys of the ``shardwise.run.*`` event's payload, which automations and their templates read."""


@dataclass(frozen=True)
class InvocationCounts:
    """This invocation's share of the run's counts: the run's at its finish less those when it took the run
    (a resumed run's earlier invocations committed the rest; see ``flows/totals.py``)."""

    rows_in: int = 0
    rows_out: int = 0
    rows_failed: int = 0
    shards_done: int = 0

    @classmethod
    def between(cls, before: RunCounts, after: RunCounts) -> InvocationCounts:
        return cls(
            after.rows_in - before.rows_in,
            after.rows_out - before.rows_out,
            after.rows_failed - before.rows_failed,
            after.shards_done - before.shards_done,
        )


@dataclass(frozen=True)
class MergeTotals:
    """The merges' split of this invocation's rows: new keys, changed inputs, and stored rows left alone.

    Summed over the shards' merges, each over all its chunks (earlier invocations' too for a resumed
    shard), so it fits neither scope of a resumed run and its closing lines leave it out."""

    inserted: int = 0
    updated: int = 0
    unchanged: int = 0


@dataclass(frozen=True)
class PrecisionUsed:
    """The precision the run scored in, and what the accuracy guard measured (None: it did not measure)."""

    name: str = "fp32"
    agreement: float | None = None
    agreement_from: str | None = None
    """``cache`` when the agreement came from the calibration cache, not a measurement in this run."""


@dataclass(frozen=True)
class LeaseHeld:
    """Who held the run's lease, and for a resumed run whom it was taken from (a line saying so)."""

    owner: str | None = None
    took_over: str | None = None


@dataclass(frozen=True)
class FanoutUsed:
    """How the shards were fanned out: the runner, the workers it was given, and how many scored a shard."""

    runner: str = "thread"
    workers: int = 1
    workers_used: int = 0


@dataclass(frozen=True)
class ShardTally:
    """The plan's shards, those already done when their turn came, and the ledger's tally of transitions."""

    planned: int = 0
    skipped: int = 0
    states: Mapping[str, int] = field(default_factory=dict)
    """Shard transitions by state (``{"done": 3, "retried": 1}``), as the ledger counts them."""


@dataclass(frozen=True)
class EngineFigures:
    """This invocation's engine figures over all its attempts; the rates are :class:`EngineStats`' own."""

    oom_splits: int = 0
    padding_efficiency: float = 1.0
    rows_per_s: float = 0.0
    tokens_per_s: float = 0.0
    wall_s: float = 0.0
    """This invocation's wall time, planning and finishing included."""


@dataclass(frozen=True)
class RunResult:
    """What a run did, as the flow that ran it saw it: two scopes, never mixed in one figure.

    ``totals`` are the whole run's (every chunk committed, by whichever
    invocation), as the ledger summed them at the finish; ``this_invocation``,
    ``merge``, ``rows_truncated`` and ``engine`` are this invocation's.
    ``skipped`` is the plan's, so the whole run's.
    """

    run_id: str
    status: Literal["completed", "failed"]
    results_table: str
    """The results table, or a lake sink's location (``delta:s3://...``)."""
    source: str
    """The source's password-free identity."""
    snapshot: str | None
    model: str
    model_version: str
    code_version: str
    started_by: str
    totals: RunCounts = field(default_factory=RunCounts)
    this_invocation: InvocationCounts = field(default_factory=InvocationCounts)
    resumed: bool = False
    lease: LeaseHeld = field(default_factory=LeaseHeld)
    precision: PrecisionUsed = field(default_factory=PrecisionUsed)
    fanout: FanoutUsed = field(default_factory=FanoutUsed)
    shards: ShardTally = field(default_factory=ShardTally)
    skipped: Skipped = field(default_factory=Skipped)
    merge: MergeTotals = field(default_factory=MergeTotals)
    rows_truncated: int = 0
    engine: EngineFigures = field(default_factory=EngineFigures)
    finished: tuple[str, ...] = ()
    """What the sink's finish did once the run completed (an ANN index built, its time), a line each."""
    stopped: str | None = None
    """``budget`` when the run's only failures were shards stopped at its budget (see
    :mod:`shardwise.cost.budget`): the ledger records it failed, to be resumed with a larger one."""
    past_budget: str | None = None
    """``past its budget: $0.0918 spent of the $0.01 budget`` when the whole run's usage passed a budget this
    invocation ran under (by the estimates' error: see :mod:`shardwise.cost.budget`); else None."""

    def event_payload(self) -> dict[str, Any]:
        """The ``shardwise.run.*`` event's payload: plain JSON values under :data:`PAYLOAD_KEYS`, in order."""
        totals, merge = self.totals, self.merge
        return {
            "run_id": self.run_id,
            "status": self.status,
            "results_table": self.results_table,
            "model": self.model,
            "model_version": self.model_version,
            "rows_in": totals.rows_in,
            "rows_out": totals.rows_out,
            "rows_failed": totals.rows_failed,
            "rows_skipped": self.skipped.total,
            "inserted": merge.inserted,
            "updated": merge.updated,
            "unchanged": merge.unchanged,
            "shards_total": totals.shards_total,
            "shards_done": totals.shards_done,
            "shards_failed": totals.shards_failed,
            "counts": dict(totals.counts),
            "cost_usd": totals.usage.cost_usd,
            "device_seconds": totals.usage.device_seconds,
            "usage": totals.usage.as_json(),
            "stopped": self.stopped,
        }


def run_result(
    planned: PlannedRun,
    outcomes: Sequence[ShardOutcome],
    totals: RunCounts,
    wall_s: float,
    *,
    runner: str,
    workers: int,
    finished: Sequence[str] = (),
    shard_states: Mapping[str, int] | None = None,
    stopped: str | None = None,
) -> RunResult:
    """The result of ``planned``'s invocation: its ``outcomes``, the run's ``totals`` as
    :func:`~shardwise.pipeline.finish_run` left them, and ``wall_s`` since it started."""
    record, run = planned.record, planned.ref.spec.run
    engine = EngineStats(  # this invocation's rows and tokens over its attempts
        rows=sum(int(o.engine.get("rows", 0)) for o in outcomes),  # not rows_in: earlier chunks count there
        real_tokens=sum(int(o.engine.get("real_tokens", 0)) for o in outcomes),
        padded_tokens=sum(int(o.engine.get("padded_tokens", 0)) for o in outcomes),
        oom_splits=sum(int(o.engine.get("oom_splits", 0)) for o in outcomes),
        wall_s=wall_s,
    )
    merges = [o.merge for o in outcomes if o.merge]
    return RunResult(
        run_id=record.run_id,
        status="failed" if totals.shards_failed else "completed",
        results_table=record.results_table,
        source=record.source_identity,
        snapshot=record.source_snapshot,
        model=planned.model.name,
        model_version=record.model_version,
        code_version=record.code_version,
        started_by=record.started_by,
        totals=totals,
        this_invocation=InvocationCounts.between(planned.before or RunCounts(), totals),
        resumed=planned.took_over is not None,
        lease=LeaseHeld(planned.owner, planned.took_over.describe() if planned.took_over else None),
        precision=PrecisionUsed(
            record.precision, record.precision_agreement, record.precision_agreement_from
        ),
        fanout=FanoutUsed(runner, workers, len({o.worker for o in outcomes if not o.skipped})),
        shards=ShardTally(
            len(planned.plan.shards),
            len(planned.done_before) + sum(o.skipped for o in outcomes),
            dict(shard_states or {}),
        ),
        skipped=Skipped.of(planned.plan),
        merge=MergeTotals(
            sum(m.inserted for m in merges), sum(m.updated for m in merges), sum(m.unchanged for m in merges)
        ),
        rows_truncated=sum(o.rows_truncated for o in outcomes),
        engine=EngineFigures(
            engine.oom_splits, engine.padding_efficiency, engine.rows_per_s, engine.tokens_per_s, wall_s
        ),
        finished=tuple(finished),
        stopped=stopped,
        past_budget=past_budget(Budget.of(run.budget_usd, run.budget_tokens), totals.usage),
    )
