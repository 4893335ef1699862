"""``plan_run``: plan the source (or load a resumed run's record and plan) and record the run.

It runs in the flow's own process (the flow calls it directly, not through a
task runner): on PostgreSQL the returned run holds the planning snapshot that
every worker imports, until the flow closes it after the last shard.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefect import get_run_logger, task

from shardwise.model import ModelInfo
from shardwise.pipeline import PlannedRun, RunSpec, prepare_run
from shardwise.tasks.connections import resolve
from shardwise.tasks.infer_shard import worker_cache
from shardwise.tasks.retry import TRANSIENT_RETRIES
from shardwise.tasks.sanitize import sanitized

__all__ = ["plan_run"]


@task(name="plan-run", **TRANSIENT_RETRIES)
def plan_run(
    spec: RunSpec,
    run_id: str,
    started_by: str,
    parameters: Mapping[str, Any],
    workers: int = 1,
    threads: int | None = None,
    described: ModelInfo | None = None,
) -> PlannedRun:
    """Everything the shard tasks share, as a small reference.

    The model is described, not loaded, unless the precision guard needs it:
    then it loads into this process's worker cache, where the thread
    runner's shard tasks find it, so the model is loaded once. The fresh
    description is also the cache's current one, so a long-lived process
    (``shardwise serve``'s warm runs) never scores with a model whose files
    changed since it loaded them. ``described`` is the description the checks before the run made of it
    a moment ago, in this process (:func:`~flows.resolved.check_resolved`): the model is then described
    once.
    """
    try:
        if described is None:
            described = worker_cache().spec(spec.model, spec.run.retry).describe()
        if worker_cache().refresh(spec.model, described):
            get_run_logger().warning(  # said where serve shows a run's warnings: files changed under it
                "model %r changed since this process loaded it (now version %s): loading it again",
                spec.model.name,
                described.version[:12],
            )
        planned = prepare_run(
            spec,
            run_id=run_id,
            started_by=started_by,
            parameters=parameters,
            model=described,
            cache=worker_cache(),
            resolve=resolve,
            workers=workers,
            threads=threads,
        )
    except Exception as exc:
        clean = sanitized(exc)
        if clean is exc:
            raise
        raise clean from None
    get_run_logger().info("run %s: %s", planned.record.run_id, planned.describe())
    for warning in planned.warnings():
        get_run_logger().warning("run %s: %s", planned.record.run_id, warning)
    for line in planned.tidied:  # leftovers of writers killed mid-commit, of runs the ledger says are over
        get_run_logger().info("run %s: %s", planned.record.run_id, line)
    idle_limit = planned.plan.params.get("snapshot_idle_limit_s")
    if idle_limit:
        get_run_logger().warning(
            "the source database ends transactions idle for more than %s s "
            "(idle_in_transaction_session_timeout), and the planning snapshot is held idle while shards "
            "run: shards that start later read at a fresh snapshot (recorded in lineage as "
            "input_snapshot). For one snapshot per run: ALTER ROLE <role> SET "
            "idle_in_transaction_session_timeout = 0",
            idle_limit,
        )
    return planned
