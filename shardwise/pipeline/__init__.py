"""The scoring pipeline without an orchestrator: prepare a run, score shards, finish the run."""

from __future__ import annotations

from shardwise.pipeline.dryrun import PlanPreview, preview_plan
from shardwise.pipeline.redrive import RedriveSelection, redrive_keys, redrive_source
from shardwise.pipeline.run import (
    PreparedRun,
    RunSpec,
    finish_run,
    open_run_source,
    plan_source,
    prepare_run,
    score_pending,
)
from shardwise.pipeline.shard import ShardOutcome, score_shard

__all__ = [
    "PlanPreview",
    "PreparedRun",
    "RedriveSelection",
    "RunSpec",
    "ShardOutcome",
    "finish_run",
    "open_run_source",
    "plan_source",
    "prepare_run",
    "preview_plan",
    "redrive_keys",
    "redrive_source",
    "score_pending",
    "score_shard",
]
