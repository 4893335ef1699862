"""Fan a planned run's shards out to workers and gather what each did.

Tasks (threads, processes, Dask, Ray) get ``infer_shard(ref, shard_id)``
through the chosen task runner. The ``deployment`` runner starts one child
flow run per shard instead (:func:`start_shard_flow`), with the idempotency
key ``<run_id>:<shard_id>``; a child's return value does not come back to
the parent, so its outcome is read from the ledger, which is the record of
what was merged anyway.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import unmapped

from shardwise.errors import ShardwiseError, WorkerPreempted
from shardwise.pipeline import PlannedRun, RunRef, ShardOutcome
from shardwise.secrets.redact import redact
from shardwise.tasks.connections import Held
from shardwise.tasks.infer_shard import infer_shard
from shardwise.tasks.retry import task_retries
from shardwise.tasks.runners import Fanout
from shardwise.waiting import record_wait_s, until_back
from shardwise.words import plural

__all__ = ["PREEMPTED_ROUNDS", "run_shards", "start_shard_flow"]

Advance = Callable[[ShardOutcome | None], None]
PREEMPTED_ROUNDS = 10
"""Rounds of a run's shards at most: the first, then one after each round in which a worker was preempted."""


def run_shards(
    planned: PlannedRun, fanout: Fanout, advance: Advance
) -> tuple[list[ShardOutcome], dict[int, str]]:
    """Score every pending shard on ``fanout``; the outcomes, and the error of each shard that failed.

    A shard let go by a preempted worker (SIGTERM, see
    :mod:`~shardwise.pipeline.preemption`) is not a failure: once the shards
    in flight end, those let go, with any the same round lost to the broken
    process pool, are scheduled again on fresh workers, for at most
    :data:`PREEMPTED_ROUNDS` rounds in all.
    """
    if not planned.todo:
        return [], {}
    logger = get_run_logger()
    todo = plural(len(planned.todo), "shard")
    logger.info("run %s: %s %s", planned.ref.run_id, todo, fanout.describe())
    if fanout.runner == "deployment":
        return _child_flows(planned, fanout, advance)
    outcomes: list[ShardOutcome] = []
    failed: dict[int, str] = {}
    shards = list(planned.todo)
    for round_ in range(1, PREEMPTED_ROUNDS + 1):
        scored, lost = _round(planned, fanout, shards, advance)
        outcomes.extend(scored)
        again = _let_go(planned, lost) if round_ < PREEMPTED_ROUNDS else set()
        for shard_id, error in lost.items():
            if shard_id not in again:
                failed[shard_id] = redact(f"{type(error).__name__}: {error}")
                advance(None)
        if not again:
            break
        shards = sorted(again)
        logger.warning(
            "run %s: %s let go by a preempted worker (SIGTERM); scheduled again on fresh workers: %s",
            planned.ref.run_id, plural(len(shards), "shard"), ", ".join(map(str, shards)),
        )  # fmt: skip
    _record_failures(planned, failed)
    return outcomes, failed


def _round(
    planned: PlannedRun, fanout: Fanout, shards: list[int], advance: Advance
) -> tuple[list[ShardOutcome], dict[int, BaseException]]:
    """Score ``shards`` on a fresh task runner: the outcomes, and the error each other shard ended with."""
    outcomes: list[ShardOutcome] = []
    lost: dict[int, BaseException] = {}
    with fanout.guarding(), fanout.task_runner() as runner, fanout.task_options():
        spec = planned.ref.spec
        held = Held.of(spec.source.location, spec.results_location, *([spec.ledger] if spec.ledger else []))
        futures = runner.map(
            infer_shard.with_options(**task_retries(spec.run.retry)),  # the run's attempts and backoff
            {"ref": unmapped(planned.ref), "shard_id": shards, "held": unmapped(held)},
        )
        shard_of = dict(zip((f.task_run_id for f in futures), shards, strict=True))
        for future in as_completed(futures):
            result = _result(future)
            if isinstance(result, ShardOutcome):
                outcomes.append(result)
                advance(result)
            else:
                lost[shard_of[future.task_run_id]] = result
    return outcomes, lost


def _let_go(planned: PlannedRun, lost: dict[int, BaseException]) -> set[int]:
    """The shards of ``lost`` to schedule again: those a preempted worker let go, and those lost with
    a process pool that a preempted worker's exit broke.

    A worker's exit breaks a process pool: the pool fails every shard in
    flight (``BrokenProcessPool``) and stops the other workers with SIGTERM,
    so they let their shards go too. Those are scheduled again when the
    ledger shows a preemption among them and no shard left ``running``: a
    worker that crashed (OOM-killed, a segfault) leaves its shard
    ``running``, and its round fails as before, for ``--resume``.
    """
    let_go = {shard_id for shard_id, error in lost.items() if isinstance(error, WorkerPreempted)}
    broken = {shard_id for shard_id, error in lost.items() if _lost_with_worker(error)}
    if not broken:
        return let_go
    try:
        stored = {s.shard_id: s for s in planned.ledger.shards(planned.ref.run_id)}
    except ShardwiseError:  # a ledger out of reach: those shards fail, and --resume finishes them
        return let_go
    held = any(stored[shard_id].status == "running" for shard_id in broken)
    preempted = let_go or any(
        stored[shard_id].status == "retrying"
        and (stored[shard_id].last_error or "").startswith(WorkerPreempted.__name__)
        for shard_id in broken
    )
    return let_go if held or not preempted else let_go | broken


def _lost_with_worker(error: BaseException) -> bool:
    """A shard the engine lost with its worker: a broken process pool, or a task Dask gave up on after
    losing the workers that ran it (``KilledWorker``, from distributed, which may not be installed)."""
    return isinstance(error, BrokenProcessPool) or type(error).__name__ == "KilledWorker"


def _result(future: Any) -> Any:
    """The task's return value or its exception; also when the engine lost the worker.

    A dead process pool (``BrokenProcessPool``) or a shard Dask gave up on
    (``KilledWorker``) raises even with ``raise_on_failure=False``.
    """
    try:
        return future.result(raise_on_failure=False)
    except Exception as exc:
        return exc


def _record_failures(planned: PlannedRun, failed: dict[int, str]) -> None:
    """Mark failed shards in the ledger: a worker that died could not; a done shard stays done.

    A database that is down (the likely reason the shards failed) is waited
    for (:func:`~shardwise.waiting.until_back`, at least as long as the run's
    retry deadline), so the ledger ends up naming each failed shard and its
    error instead of leaving it pending.
    """
    logger = get_run_logger()
    for shard_id, message in failed.items():
        until_back(
            functools.partial(planned.ledger.mark_shard_failed, planned.ref.run_id, shard_id, message),
            what=f"recording the failure of shard {shard_id}",
            log=logger.warning,
            wait_s=record_wait_s(planned.ref.spec.run.retry),
        )


@task(name="shard-flow-run", task_run_name="shard-{shard_id}", cache_policy=NO_CACHE)
def start_shard_flow(ref: RunRef, shard_id: int, deployment: str, idempotency_key: str) -> int:
    """Run the shard as a child flow run of ``deployment`` and wait for it; raise if it did not complete."""
    from prefect.deployments import run_deployment

    child = run_deployment(
        deployment,
        parameters={"ref": ref, "shard_id": shard_id},
        idempotency_key=idempotency_key,
        as_subflow=True,
        timeout=None,
    )
    state = child.state
    if state is None or not state.is_completed():
        name = state.name if state is not None else "without a state"
        raise ShardwiseError(
            f"child flow run {child.name!r} of deployment {deployment!r} ended {name}: "
            f"{redact(state.message or '') if state is not None else ''}".rstrip(": ")
        )
    return shard_id


def _child_flows(
    planned: PlannedRun, fanout: Fanout, advance: Advance
) -> tuple[list[ShardOutcome], dict[int, str]]:
    assert fanout.deployment is not None
    ref, todo = planned.ref, list(planned.todo)
    # A retried parent flow run reuses its keys, so no shard gets a second child; a resume is
    # a new parent flow run, and it must start new children for the shards that failed.
    parent = str(flow_run.id or "")
    suffix = "" if parent in ("", ref.run_id) else f":{parent}"
    keys = [f"{ref.run_id}:{shard_id}{suffix}" for shard_id in todo]
    done: list[int] = []
    failed: dict[int, str] = {}
    with ThreadPoolTaskRunner(max_workers=min(len(todo), fanout.in_flight or len(todo))) as runner:
        futures = runner.map(
            start_shard_flow,
            {
                "ref": unmapped(ref),
                "shard_id": todo,
                "deployment": unmapped(fanout.deployment),
                "idempotency_key": keys,
            },
        )
        shard_of = dict(zip((f.task_run_id for f in futures), todo, strict=True))
        for future in as_completed(futures):
            result = _result(future)
            if isinstance(result, int):
                done.append(result)
            else:
                failed[shard_of[future.task_run_id]] = redact(f"{type(result).__name__}: {result}")
            advance(None)
    _record_failures(planned, failed)
    stored = {s.shard_id: s for s in planned.ledger.shards(ref.run_id)}
    outcomes = [ShardOutcome.from_ledger(stored[i]) for i in done if stored[i].status == "done"]
    return outcomes, failed
