"""The ``score`` flow: plan the shards, fan them out to workers, then decide the run's state."""

from __future__ import annotations

import time
import uuid

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.states import Completed, Failed, State

from shardwise.flows.interrupts import hold, let_go
from shardwise.flows.origin import check_model_for_origin, started_by
from shardwise.flows.params import ScoreParams
from shardwise.flows.resolved import check_resolved, take_resolved
from shardwise.flows.totals import budget_line, budget_stop, closing_lines
from shardwise.pipeline import finish_results, finish_run
from shardwise.pipeline.home import calibration_cache, converted_cache, equip
from shardwise.pipeline.resume import resume_command
from shardwise.pipeline.run_result import run_result
from shardwise.secrets.redact import redact_mapping
from shardwise.tasks import plan_run
from shardwise.tasks.artifacts import publish_run, worker_rows
from shardwise.tasks.dry_run import dry_run
from shardwise.tasks.events import emit_run_finished
from shardwise.tasks.fanout import run_shards
from shardwise.tasks.infer_shard import release_run, worker_cache
from shardwise.tasks.progress import ProgressPublisher
from shardwise.tasks.retry import task_retries
from shardwise.tasks.sanitize import sanitized
from shardwise.tasks.superseded import crash_superseded_flow_run
from shardwise.waiting import record_wait_s, until_back
from shardwise.words import plural

__all__ = ["score"]


@flow(name="score")
def score(params: ScoreParams) -> State:
    """Score a source table into a results table, each shard exactly once.

    The plan, and on PostgreSQL its snapshot, stay in this process; the shards
    go to the workers of ``params.fanout.runner``. The run ends Failed, naming its
    failed shards, if any shard still fails after its retries; finished shards
    stay merged, and ``resume`` finishes the rest. An error that ends it is
    redacted first (:func:`~shardwise.tasks.sanitize.sanitized`): Prefect
    stores its message as the flow run's state.
    """
    try:
        return _score(params)
    except Exception as exc:
        clean = sanitized(exc)
        if clean is exc:
            raise
        raise clean from None


def _score(params: ScoreParams) -> State:
    check_model_for_origin(params.model.name)
    resolved = take_resolved(params)  # resolved by the command line's preflight, or now
    if resolved.model is None:  # no command line checked them (the UI, a trigger, a deployment): now,
        resolved, idle = check_resolved(resolved, dry_run=params.run.dry_run)  # before anything is recorded
        if idle is not None:
            return Completed(message=idle)
    spec, fanout = resolved.spec, resolved.fanout
    if params.run.dry_run:
        report = dry_run(spec, fanout.workers, calibration_cache(), converted_cache())
        said = f"dry run: {plural(report['shards'], 'shard')}, {plural(report['rows'], 'row')}"
        return Completed(message=said, data=report)
    logger = get_run_logger()
    started = time.perf_counter()
    equip(worker_cache())  # the guard's figures and converted models of this host, between runs
    run_id = str(flow_run.id or uuid.uuid4())
    parameters = redact_mapping(params.model_dump())
    planning = plan_run.with_options(**task_retries(spec.run.retry))
    planned = planning(
        spec, run_id, started_by(params), parameters, fanout.workers, fanout.threads, resolved.model
    )
    hold(planned)  # a signal to the command releases the run's lease and names it (flows/interrupts.py)
    try:
        if planned.took_over is not None:  # a resume: the run's lease is ours now
            logger.info("run %s resumed; it was %s", planned.ref.run_id, planned.took_over.describe())
            crash_superseded_flow_run(planned.ref.run_id, planned.took_over, run_id)
        with ProgressPublisher(planned.ledger, planned.ref.run_id) as progress:
            outcomes, failed = run_shards(planned, fanout, progress.advance)
        counts = until_back(
            lambda: finish_run(planned, sorted(failed)),
            what=f"finishing run {run_id}",
            log=logger.warning,
            wait_s=record_wait_s(planned.ref.spec.run.retry),
        )
        states = planned.ledger.shard_tally(planned.ref.run_id)  # the database is back: finish_run wrote
        finished = [] if failed else finish_results(planned)  # an ANN index, with its build time
        for line in finished:
            logger.info("run %s: %s", run_id, line)
    finally:
        let_go(planned)
        planned.close()
        release_run(planned.ref.run_id)
    result = run_result(
        planned,
        outcomes,
        counts,
        time.perf_counter() - started,
        runner=fanout.runner,
        workers=fanout.workers,
        finished=finished,
        shard_states=states,
        stopped="budget" if failed and all(budget_stop(m) for m in failed.values()) else None,
    )
    publish_run(result, outcomes, failed)
    emit_run_finished(result, params.event_name())
    for worker in worker_rows(outcomes):
        logger.info(
            "worker %s on %s: %s, %s, busy %s s (model load %s s)",
            worker["worker"],
            worker["device"],
            plural(worker["shards"], "shard"),
            plural(worker["rows"], "row"),
            worker["busy_s"],
            worker["model_load_s"],
        )
    if result.stopped == "budget":
        finish = resume_command(
            result.run_id, ledger=spec.ledger, results=params.results.location, source=spec.source.location
        )
        said = budget_line(result, spec.run.budget_usd, spec.run.budget_tokens, finish)
        logger.warning("run %s %s", run_id, said)
        return Failed(message=said, data=result)
    if failed:
        listed = _listed(failed)
        failures = f"{plural(len(failed), 'shard')} failed after retries: {listed}"
        logger.error("run %s failed: %s", run_id, failures)
        return Failed(message=failures, data=result)
    logger.info("%s", "; ".join(closing_lines(result, failed=False)))
    return Completed(message=f"scored {plural(result.totals.rows_out, 'row')}", data=result)


def _listed(failed: dict[int, str]) -> str:
    """``shard 3: error`` per failure, shards with the same error together (a dead pool fails many)."""
    by_error: dict[str, list[int]] = {}
    for shard_id, message in sorted(failed.items()):
        by_error.setdefault(message, []).append(shard_id)
    return "; ".join(
        f"shard{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}: {message}"
        for message, ids in by_error.items()
    )
