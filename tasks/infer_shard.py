"""``infer_shard``: one shard through the engine into the results store, as a retried Prefect task."""

from __future__ import annotations

import socket
from contextlib import AbstractContextManager, nullcontext

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.concurrency.sync import concurrency
from prefect.runtime import task_run
from prefect.tasks import exponential_backoff

from shardwise.pipeline import PreparedRun, ShardOutcome
from shardwise.redact import redact
from shardwise.sources import Shard
from tasks.retry import retry_transient
from tasks.sanitize import sanitized

__all__ = ["infer_shard"]


@task(
    name="infer-shard",
    task_run_name="shard-{shard.shard_id}",
    retries=3,
    retry_delay_seconds=exponential_backoff(backoff_factor=2),
    retry_jitter_factor=0.5,
    retry_condition_fn=retry_transient,
    # The ledger in the results database decides what is done; Prefect's cache must not.
    cache_policy=NO_CACHE,
)
def infer_shard(prepared: PreparedRun, shard: Shard) -> ShardOutcome:
    """Score ``shard`` unless the ledger says it is done; record a failed attempt before re-raising."""
    logger = get_run_logger()
    attempt = int(task_run.run_count or 1)
    run_id = prepared.record.run_id
    try:
        with _device_slot(prepared):
            outcome = prepared.score(shard, attempt)
    except Exception as exc:
        message = redact(f"{type(exc).__name__}: {exc}")
        prepared.store.mark_shard_failed(run_id, shard.shard_id, attempt, message)
        logger.warning("shard %d attempt %d failed: %s", shard.shard_id, attempt, message)
        clean = sanitized(exc)
        if clean is exc:
            raise
        raise clean from None
    if outcome.skipped:
        logger.info("shard %d was already done; skipped", shard.shard_id)
    else:
        logger.info(
            "shard %d done: %d rows in, %d scored, %d dead letters, %.3f padding efficiency, %.0f rows/s%s",
            shard.shard_id,
            outcome.rows_in,
            outcome.rows_out,
            outcome.rows_failed,
            outcome.engine.get("padding_efficiency", 1.0),
            outcome.engine.get("rows_per_s", 0.0),
            " (snapshot was gone: read at a fresh one, recorded in lineage)" if outcome.snapshot_lost else "",
        )
    return outcome


def _device_slot(prepared: PreparedRun) -> AbstractContextManager[object]:
    """On CUDA, hold one slot of the global concurrency limit ``gpu-<host>`` while scoring.

    Create the limit once per host with as many slots as it has GPUs
    (``prefect gcl create gpu-$(hostname) --limit N``): flow runs from any
    deployment then share the GPUs instead of oversubscribing them. Without
    the limit Prefect logs a warning and does not limit.
    """
    if prepared.model.device.type != "cuda":
        return nullcontext()
    return concurrency(f"gpu-{socket.gethostname()}", occupy=1)
