"""``infer_shard``: one shard, named by a run reference and a shard id, scored on whichever worker runs it.

Only the :class:`~shardwise.pipeline.RunRef` (plain data, connection *names*)
and the shard id cross to the worker, with the URLs the command line held in
memory for a local run (:class:`~shardwise.tasks.connections.Held`). The
worker resolves the names in its own environment and keeps its model and open
run in this module's per-process cache, so a worker that scores ten shards
loads its model once.

The task's tries are the run's :class:`~shardwise.retry_policy.RetryPolicy`
attempts (the flow applies them with :func:`~shardwise.tasks.retry.task_retries`),
and every try of one task run shares one
:class:`~shardwise.retry_policy.Outage`: Prefect retries a task in the
process that ran it, so the clock lives here, keyed by the task run, and the
tries never get more than the one deadline between them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from prefect import get_run_logger, task
from prefect.context import TaskRunContext
from prefect.runtime import task_run

from shardwise.errors import ShardwiseError, TransientError, WorkerPreempted
from shardwise.model.counts import said
from shardwise.models import get_spec
from shardwise.pipeline import RunRef, RunSpec, ShardOutcome, WorkerCache, score_ref_shard, warm
from shardwise.pipeline.destination import ledger_url
from shardwise.pipeline.home import equip
from shardwise.pipeline.preemption import shard_in_hand
from shardwise.pipeline.shard import this_worker
from shardwise.results import Ledger
from shardwise.retry_policy import Outage
from shardwise.secrets.redact import redact
from shardwise.tasks.connections import Held, resolve
from shardwise.tasks.retry import TRANSIENT_RETRIES
from shardwise.tasks.sanitize import sanitized

__all__ = ["WORKER", "infer_shard", "release_run", "score_here", "warm_here", "worker_cache"]

WORKER = WorkerCache(get_spec, resolve=resolve)
"""This process's models and open runs, shared by every shard task it runs."""
_OUTAGES: dict[str, Outage] = {}
"""The retry clock of each task run with a try still to come, by task run id."""
_OUTAGES_LOCK = threading.Lock()


@task(name="infer-shard", task_run_name="shard-{shard_id}", **TRANSIENT_RETRIES)
def infer_shard(ref: RunRef, shard_id: int, held: Held | None = None) -> ShardOutcome:
    """Score shard ``shard_id`` unless the ledger says it is done; record a failure before re-raising:
    ``retrying`` when the task will try again, or when its worker was preempted and the flow runs it
    elsewhere (:mod:`shardwise.pipeline.preemption`), else ``failed`` (see
    :mod:`shardwise.results.shard_states`)."""
    if held is not None:
        held.install()
    logger = get_run_logger()
    with shard_in_hand():  # a worker told to stop (SIGTERM) exits 0 once its shard is let go and recorded
        try:
            with _shard_clock(ref) as outage:
                outcome = score_here(ref, shard_id, outage)
        except Exception as exc:
            message = redact(f"{type(exc).__name__}: {exc}")
            preempted = isinstance(exc, WorkerPreempted)  # the flow runs it on another worker
            again = preempted or _tries_again(exc)
            _record_failure(ref, shard_id, message, again)
            logger.warning(
                "shard %d try %d %s: %s",
                shard_id, int(task_run.run_count or 1),
                "let go" if preempted else "failed; it is tried again" if again else "failed", message,
            )  # fmt: skip
            clean = sanitized(exc)
            if clean is exc:
                raise
            raise clean from None
    if outcome.skipped:
        logger.info("shard %d was already done; skipped (on %s)", shard_id, outcome.worker)
    else:
        logger.info(
            "shard %d attempt %d done on %s (%s): %d rows in, %d scored, %d dead letters, "
            "%.3f padding efficiency, %.0f rows/s%s, model load %.1f s%s%s",
            shard_id,
            outcome.attempt,
            outcome.worker,
            outcome.device,
            outcome.rows_in,
            outcome.rows_out,
            outcome.rows_failed,
            outcome.engine.get("padding_efficiency", 1.0),
            outcome.engine.get("rows_per_s", 0.0),
            "".join(f", {count}" for count in said(outcome.counts)),
            outcome.model_load_s,
            " (snapshot was gone: read at a fresh one, recorded in lineage)" if outcome.snapshot_lost else "",
            _resumed(outcome),
        )
    return outcome


def _resumed(outcome: ShardOutcome) -> str:
    """Where a retried or resumed attempt started: after the chunks earlier attempts committed."""
    resumed = int(outcome.engine.get("resumed_rows", 0))
    return f"; resumed after {resumed} rows that earlier attempts committed" if resumed else ""


def score_here(ref: RunRef, shard_id: int, outage: Outage | None = None) -> ShardOutcome:
    """Score with this process's cache, on the shard's retry clock ``outage`` (None: a fresh one).

    Task and flow functions travel to workers by value (cloudpickle), so they
    must not name the cache itself, which holds locks and connections; this
    module-level function travels by reference and finds the worker's own,
    equipped with what this host keeps between runs (a worker process of
    the pool, Dask or Ray reads the guard's figures and converted models too,
    rather than measuring and converting again).
    """
    equip(WORKER)
    return score_ref_shard(ref, shard_id, WORKER, resolve=resolve, outage=outage)


@contextlib.contextmanager
def _shard_clock(ref: RunRef) -> Iterator[Outage]:
    """This task run's retry clock: kept for its next try after a transient failure, else dropped."""
    context = TaskRunContext.get()
    if context is None:  # called as a plain function: one try
        yield Outage(ref.spec.run.retry)
        return
    key = str(context.task_run.id)
    with _OUTAGES_LOCK:
        outage = _OUTAGES.setdefault(key, Outage(ref.spec.run.retry))
    try:
        yield outage
    except BaseException as exc:
        if not _tries_again(exc):
            _forget(key)
        raise  # when tried again, on this clock
    _forget(key)


def _tries_again(exc: BaseException) -> bool:
    """Whether this task run will try again after ``exc``: a transient error, with tries left (the
    rule :func:`~shardwise.tasks.retry.retry_transient` gives Prefect)."""
    context = TaskRunContext.get()
    if context is None or not isinstance(exc, TransientError):
        return False
    return int(task_run.run_count or 1) <= context.task.retries


def _forget(key: str) -> None:
    with _OUTAGES_LOCK:
        _OUTAGES.pop(key, None)


def worker_cache() -> WorkerCache:
    """This process's cache, found by reference (see :func:`score_here`): the planner loads into it."""
    return WORKER


def warm_here(spec: RunSpec) -> None:
    """Load ``spec``'s model into this process's cache ahead of the run (see :func:`warm`).

    Best effort: a failure here is left for planning to meet and report.
    """
    try:
        equip(WORKER)
        warm(spec, WORKER)
    except Exception as exc:
        logging.getLogger(__name__).debug("warming model %r failed: %s", spec.model.name, exc)


def release_run(run_id: str) -> None:
    """Close what this process holds for a finished run (the thread runner's workers live here)."""
    WORKER.release(run_id)


def _record_failure(ref: RunRef, shard_id: int, message: str, again: bool) -> None:
    """Record the try's error on the shard's ledger row, ``retrying`` when another try comes, else
    ``failed``; a ledger that cannot be reached is only logged (the flow records a final failure
    once it is back)."""
    worker = this_worker().worker
    try:
        with Ledger(ledger_url(ref.spec, resolve)) as ledger:
            if again:
                ledger.mark_shard_retrying(ref.run_id, shard_id, message, worker)
            else:
                ledger.mark_shard_failed(ref.run_id, shard_id, message, worker)
    except ShardwiseError as exc:
        get_run_logger().warning("could not record the failure of shard %d: %s", shard_id, redact(str(exc)))
