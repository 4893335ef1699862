"""The scoring pipeline without an orchestrator: prepare a run, score shards, finish the run."""

from __future__ import annotations

from shardwise.pipeline.run import PreparedRun, RunSpec, finish_run, open_run_source, prepare_run
from shardwise.pipeline.shard import ShardOutcome, score_shard

__all__ = [
    "PreparedRun",
    "RunSpec",
    "ShardOutcome",
    "finish_run",
    "open_run_source",
    "prepare_run",
    "score_shard",
]
