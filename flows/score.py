"""The ``score`` flow: plan the shards, fan them out to workers, then decide the run's state."""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.states import Completed, Failed, State

from shardwise.flows.home import calibration_cache
from shardwise.flows.interrupts import hold, let_go
from shardwise.flows.origin import check_model_for_origin, started_by
from shardwise.flows.params import ScoreParams
from shardwise.flows.totals import closing_lines, this_invocation
from shardwise.flows.where_policy import refuse_forbidden_where
from shardwise.pipeline import PlannedRun, ShardOutcome, finish_results, finish_run
from shardwise.pipeline.skipped import Skipped
from shardwise.redact import redact_mapping
from shardwise.results import RunCounts
from shardwise.stats import EngineStats
from shardwise.tasks import plan_run
from shardwise.tasks.artifacts import publish_run, worker_rows
from shardwise.tasks.connections import resolve
from shardwise.tasks.dry_run import dry_run
from shardwise.tasks.events import emit_run_finished
from shardwise.tasks.fanout import run_shards
from shardwise.tasks.infer_shard import release_run, worker_cache
from shardwise.tasks.progress import ProgressPublisher
from shardwise.tasks.retry import task_retries
from shardwise.tasks.runners import Fanout
from shardwise.tasks.sanitize import sanitized
from shardwise.tasks.superseded import crash_superseded_flow_run
from shardwise.waiting import record_wait_s, until_back
from shardwise.words import plural

__all__ = ["score"]


@flow(name="score")
def score(params: ScoreParams) -> State:
    """Score a source table into a results table, each shard exactly once.

    The plan, and on PostgreSQL its snapshot, stay in this process; the shards
    go to the workers of ``params.runner``. The run ends Failed, naming its
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
    check_model_for_origin(params.model)
    refuse_forbidden_where(params.where)
    if params.dry_run:
        report = dry_run(params.to_spec(), params.fanout().workers)
        return Completed(message=f"dry run: {report['shards']} shards, {report['rows']} rows", data=report)
    logger = get_run_logger()
    started = time.perf_counter()
    worker_cache().calibration = calibration_cache()  # the guard's figures of this host, between runs
    spec, fanout = params.to_spec(), params.fanout()
    fanout.check_reachable(spec, resolve)
    run_id = str(flow_run.id or uuid.uuid4())
    parameters = redact_mapping(params.model_dump())
    planning = plan_run.with_options(**task_retries(spec.retry))
    planned = planning(spec, run_id, started_by(params), parameters, fanout.workers, fanout.threads)
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
            wait_s=record_wait_s(planned.ref.spec.retry),
        )
        states = planned.ledger.shard_tally(planned.ref.run_id)  # the database is back: finish_run wrote
        finished = [] if failed else finish_results(planned)  # an ANN index, with its build time
        for line in finished:
            logger.info("run %s: %s", run_id, line)
    finally:
        let_go(planned)
        planned.close()
        release_run(planned.ref.run_id)
    summary = _summary(planned, fanout, outcomes, dataclasses.asdict(counts), time.perf_counter() - started)
    summary["finished"] = finished
    summary["shard_states"] = states
    publish_run(summary, outcomes, failed)
    emit_run_finished(summary, params.event_name())
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
    if failed:
        listed = _listed(failed)
        failures = f"{plural(len(failed), 'shard')} failed after retries: {listed}"
        logger.error("run %s failed: %s", run_id, failures)
        return Failed(message=failures, data=summary)
    logger.info("%s", "; ".join(closing_lines(summary, failed=False)))
    return Completed(message=f"scored {plural(summary['rows_out'], 'row')}", data=summary)


def _listed(failed: dict[int, str]) -> str:
    """``shard 3: error`` per failure, shards with the same error together (a dead pool fails many)."""
    by_error: dict[str, list[int]] = {}
    for shard_id, message in sorted(failed.items()):
        by_error.setdefault(message, []).append(shard_id)
    return "; ".join(
        f"shard{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}: {message}"
        for message, ids in by_error.items()
    )


def _summary(
    planned: PlannedRun, fanout: Fanout, outcomes: list[ShardOutcome], counts: dict[str, Any], wall_s: float
) -> dict[str, Any]:
    record, skipped = planned.record, Skipped.of(planned.plan)
    total = EngineStats(  # this invocation's rows and tokens over its attempts; rates are EngineStats' own
        rows=sum(int(o.engine.get("rows", 0)) for o in outcomes),  # not rows_in: earlier chunks count there
        real_tokens=sum(int(o.engine.get("real_tokens", 0)) for o in outcomes),
        padded_tokens=sum(int(o.engine.get("padded_tokens", 0)) for o in outcomes),
        oom_splits=sum(int(o.engine.get("oom_splits", 0)) for o in outcomes),
        wall_s=wall_s,
    )
    return {
        "run_id": record.run_id,
        "status": "failed" if counts["shards_failed"] else "completed",
        "started_by": record.started_by,
        "owner": planned.owner,
        "took_over": planned.took_over.describe() if planned.took_over else None,
        "resumed": planned.took_over is not None,
        "this_invocation": this_invocation(dataclasses.asdict(planned.before or RunCounts()), counts),
        "results_table": record.results_table,
        "source": record.source_identity,
        "snapshot": record.source_snapshot,
        "model": planned.model.name,
        "model_version": record.model_version,
        "precision": record.precision,
        "precision_agreement": record.precision_agreement,
        "precision_agreement_from": record.precision_agreement_from,
        "code_version": record.code_version,
        "runner": fanout.runner,
        "workers": fanout.workers,
        "workers_used": len(worker_rows(outcomes)),
        "shards": len(planned.plan.shards),
        "shards_skipped": len(planned.done_before) + sum(o.skipped for o in outcomes),
        **counts,
        "rows_skipped": skipped.total,
        "skipped": skipped.as_dict(),
        "inserted": sum(o.merge.inserted for o in outcomes if o.merge),
        "updated": sum(o.merge.updated for o in outcomes if o.merge),
        "unchanged": sum(o.merge.unchanged for o in outcomes if o.merge),
        "rows_truncated": sum(o.rows_truncated for o in outcomes),
        "oom_splits": total.oom_splits,
        "padding_efficiency": total.padding_efficiency,
        "rows_per_s": total.rows_per_s,
        "tokens_per_s": total.tokens_per_s,
        "wall_s": wall_s,
    }
