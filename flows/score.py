"""The ``score`` flow: plan the shards, map ``infer_shard`` over them, then decide the run's state."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from prefect import flow, get_run_logger
from prefect.futures import wait
from prefect.runtime import deployment, flow_run
from prefect.states import Completed, Failed, State
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import unmapped

from flows.params import ScoreParams
from shardwise.pipeline import PreparedRun, ShardOutcome, finish_run
from shardwise.redact import redact, redact_mapping
from tasks import infer_shard, plan_run

__all__ = ["score"]


@flow(name="score", task_runner=ThreadPoolTaskRunner(max_workers=1))
def score(params: ScoreParams) -> State:
    """Score a source table into a results table, each shard exactly once.

    Shards run one at a time by default: one device, one worker. The run ends
    Failed, naming its failed shards, if any shard still fails after its
    retries; finished shards stay merged, and ``resume`` finishes the rest.
    """
    logger = get_run_logger()
    run_id = str(flow_run.id or uuid.uuid4())
    parameters = redact_mapping(params.model_dump())
    prepared = plan_run(params.to_spec(), run_id, _started_by(params), parameters)
    try:
        futures = infer_shard.map(unmapped(prepared), prepared.todo)
        wait(futures)
        outcomes: list[ShardOutcome] = []
        failed: dict[int, str] = {}
        for shard, future in zip(prepared.todo, futures, strict=True):
            result = future.result(raise_on_failure=False)
            if isinstance(result, ShardOutcome):
                outcomes.append(result)
            else:
                failed[shard.shard_id] = redact(f"{type(result).__name__}: {result}")
        counts = finish_run(prepared, sorted(failed))
    finally:
        prepared.close()
    summary = _summary(prepared, outcomes, dataclasses.asdict(counts))
    if failed:
        listed = "; ".join(f"shard {i}: {msg}" for i, msg in sorted(failed.items()))
        logger.error(
            "run %s failed: %d shard(s) failed after retries: %s", prepared.record.run_id, len(failed), listed
        )
        return Failed(message=f"{len(failed)} shard(s) failed after retries: {listed}", data=summary)
    logger.info(
        "run %s completed: %d rows scored, %d dead letters, %d shards",
        summary["run_id"],
        summary["rows_out"],
        summary["rows_failed"],
        summary["shards"],
    )
    return Completed(message=f"scored {summary['rows_out']} rows", data=summary)


def _started_by(params: ScoreParams) -> str:
    if params.triggered_by:
        return f"event:{params.triggered_by}"
    name = deployment.name
    return f"deployment:{name}" if name else "cli"


def _summary(prepared: PreparedRun, outcomes: list[ShardOutcome], counts: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": prepared.record.run_id,
        "results_table": prepared.record.results_table,
        "model": prepared.model.name,
        "model_version": prepared.model.version,
        "shards": len(prepared.plan.shards),
        "shards_skipped": len(prepared.done_before) + sum(o.skipped for o in outcomes),
        **counts,
        "inserted": sum(o.merge.inserted for o in outcomes if o.merge),
        "updated": sum(o.merge.updated for o in outcomes if o.merge),
        "unchanged": sum(o.merge.unchanged for o in outcomes if o.merge),
        "oom_splits": sum(int(o.engine.get("oom_splits", 0)) for o in outcomes),
    }
