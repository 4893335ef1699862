"""``plan_run``: load the model, plan the source (or load a resumed run's plan), record the run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from shardwise.pipeline import PreparedRun, RunSpec, prepare_run
from tasks.models import load_model
from tasks.retry import retry_transient
from tasks.sanitize import sanitized

__all__ = ["plan_run"]


@task(
    name="plan-run",
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=2),
    retry_jitter_factor=0.5,
    retry_condition_fn=retry_transient,
    cache_policy=NO_CACHE,
)
def plan_run(spec: RunSpec, run_id: str, started_by: str, parameters: Mapping[str, Any]) -> PreparedRun:
    """Everything the shard tasks share; on PostgreSQL it holds the run's snapshot open."""
    try:
        prepared = prepare_run(
            spec, run_id=run_id, started_by=started_by, parameters=parameters, load_model=load_model
        )
    except Exception as exc:
        clean = sanitized(exc)
        if clean is exc:
            raise
        raise clean from None
    plan = prepared.plan
    get_run_logger().info(
        "run %s: %d shards over %s (%d rows expected, snapshot %s); %d already done; model %s %s",
        prepared.record.run_id,
        len(plan.shards),
        plan.identity,
        plan.expected_rows,
        plan.snapshot or "none",
        len(prepared.done_before),
        prepared.model.name,
        prepared.model.version[:12],
    )
    return prepared
