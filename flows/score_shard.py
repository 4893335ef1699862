"""The ``score-shard`` flow: one shard of a planned run, as its own flow run on a work pool.

The ``score`` flow with ``runner: deployment`` starts one run of this flow per
shard through the ``score-shard/per-shard`` deployment (``prefect.yaml``), so a
work pool places each shard: on Kubernetes, one pod with one GPU per shard.
It gets the run reference and the shard id only, and does what a shard task
does on any other runner: resolve the connection names in its own
environment, load the model, score the shard exactly once.
"""

from __future__ import annotations

from prefect import flow

from shardwise.flows.origin import check_model_for_origin
from shardwise.pipeline import RunRef, ShardOutcome
from shardwise.tasks.infer_shard import infer_shard
from shardwise.tasks.retry import task_retries

__all__ = ["score_shard"]


@flow(name="score-shard")
def score_shard(ref: RunRef, shard_id: int) -> ShardOutcome:
    """Score shard ``shard_id`` of the run behind ``ref``; the shard task retries transient errors."""
    check_model_for_origin(ref.spec.model.name)
    return infer_shard.with_options(**task_retries(ref.spec.run.retry))(ref, shard_id)
