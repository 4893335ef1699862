"""The planning side of a run: plan it (or load a resumed run), record it, hold its snapshot, finish it.

The flow in ``flows/score.py`` calls :func:`prepare_run` in its own process,
fans ``PlannedRun.ref`` and the pending shard ids out to workers (see
:mod:`shardwise.pipeline.worker`), then calls :func:`finish_run`.
:func:`score_pending` is the same story without an orchestrator. Nothing
here knows about Prefect.

Planning needs no model on a device, only its :class:`ModelInfo` (name,
version, outputs), so a CPU-only process can plan a GPU run.

On PostgreSQL the planning transaction exports its snapshot and stays open
in this process until :meth:`PlannedRun.close`; workers in other processes or
on other machines import it. A **resumed** run reads its record and plan
from the ledger before anything else and never plans again: its lineage
keeps the stored plan's snapshot (a Parquet listing's digest, or the
PostgreSQL snapshot, which by then is gone, so its shards read at a fresh
one and record that one per row).

The run's :class:`~shardwise.retry_policy.RetryPolicy` is recorded in its
plan (``params["retry"]``), and the :class:`RunRef` every worker gets
carries the recorded one: all workers of a run, and every resume of it,
retry alike. A resume that asks for another policy keeps the recorded one
and logs so; a run recorded before policies takes the resume's.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from shardwise.cost.budget import Budget
from shardwise.errors import ShardwiseError
from shardwise.lineage import code_version
from shardwise.model import Loaded, ModelInfo, PromptCounting
from shardwise.pipeline.budget_chunks import (
    budget_chunk_rows,
    calibrated,
    earlier_runs,
    estimate_run,
    recorded_chunks,
    sized_plan,
)
from shardwise.pipeline.destination import ResultsPlace, ledger_url, only_new_sink, results_place
from shardwise.pipeline.lease import LeaseKeeper, Takeover, run_lease_keeper
from shardwise.pipeline.leftovers import tidy_leftovers
from shardwise.pipeline.model_inputs import check_model_inputs
from shardwise.pipeline.resume import recorded_retry, resume_run
from shardwise.pipeline.run_precision import PrecisionChoice, choose_precision, hardware_precision
from shardwise.pipeline.shard import this_worker
from shardwise.pipeline.skipped import null_key_warning
from shardwise.pipeline.source_plan import SHARDS_PER_WORKER, plan_source, redrive_plan_source
from shardwise.pipeline.spec import Resolver, RunRef, RunSpec, as_is
from shardwise.pipeline.worker import WorkerCache, chunk_rows, open_spec_source, score_ref_shard
from shardwise.precision import cpu_int8_kernel, emulated_int8_warning, versioned
from shardwise.precision.guard import minimum_agreement, shown
from shardwise.records import RunRecord
from shardwise.results import Ledger, ResultStore, RunCounts
from shardwise.secrets.by_reference import by_reference
from shardwise.sinks import Sink
from shardwise.sources import Source, SourcePlan, is_keyed, plan_objects
from shardwise.words import plural

__all__ = ["PlannedRun", "finish_results", "finish_run", "prepare_run", "score_pending"]

_log = logging.getLogger(__name__)


@dataclass
class PlannedRun:
    """A recorded run, ready to fan out: the reference workers get, and what the planner holds."""

    ref: RunRef
    record: RunRecord
    """The run as the ledger stores it (for a resumed run: as first recorded)."""
    plan: SourcePlan
    model: ModelInfo
    todo: tuple[int, ...]
    """Shard ids still to score."""
    done_before: frozenset[int]
    ledger: Ledger
    source: Source | None
    """The planning source; on PostgreSQL it holds the run's snapshot open. None for a resumed run."""
    owner: str | None = None
    """This process as the holder of the run's lease (``host:pid/thread``)."""
    keeper: LeaseKeeper | None = None
    """Renews the run's lease until :func:`finish_run` or :meth:`close`."""
    took_over: Takeover | None = None
    """For a resumed run: whom its lease was taken from, and in which state the run was."""
    sink: Sink | None = None
    """Where the results go; its :meth:`~shardwise.sinks.Sink.finish` runs once the run completed."""
    before: RunCounts | None = None
    """The run's counts when this process took it: what earlier invocations committed (a resumed run's
    done shards and committed chunks), zeros for a new run. The run's counts at its finish less these
    are what this invocation did."""
    tidied: tuple[str, ...] = ()
    """What the sink deleted as the run started: leftovers of writers killed mid-commit, of runs the
    ledger says are over (see :mod:`shardwise.pipeline.leftovers`), a line each."""

    def describe(self) -> str:
        """One line for the log: the shards over the source, rows expected, shards already done, model."""
        plan, record = self.plan, self.record
        least = minimum_agreement(record.precision, self.ref.spec.run.min_agreement)  # type: ignore[arg-type]
        found = record.precision_agreement
        cached = ", from the calibration cache" if record.precision_agreement_from == "cache" else ""
        # int8's speed depends on the CPU's int8 instructions (its results do not): say which it has.
        kernel = f", int8 kernel {cpu_int8_kernel()}" if record.precision == "int8" else ""
        agreement = (
            "" if found is None else f" (agreement with fp32 {shown(found)}{cached}, minimum {least}{kernel})"
        )
        return (
            f"{plural(len(plan.shards), 'shard')} over {plan.identity} ({plural(plan.expected_rows, 'row')} "
            f"expected, snapshot {plan.snapshot or 'none'}); {len(self.done_before)} already done; "
            f"model {self.model.name} {self.model.version[:12]} in {record.precision}{agreement}"
        )

    def warnings(self) -> list[str]:
        """What to warn of before the shards run: rows the plan skips for a NULL key (see
        :mod:`shardwise.pipeline.skipped`), which the run's summary counts too, and int8 on a CPU that
        would emulate it (see :func:`~shardwise.precision.emulated_int8_warning`)."""
        found = (null_key_warning(self.plan), emulated_int8_warning(self.record.precision))
        return [w for w in found if w is not None]

    def close(self) -> None:
        """Stop renewing the run's lease and release it; release the snapshot and the ledger's connections.

        It never raises: once the shards are merged, a lost snapshot holder (a
        database restart, a terminated backend) changes nothing that was
        written, so it is logged, not reported as a failed run.
        """
        if self.keeper is not None:
            self.keeper.stop()
        try:
            if self.owner is not None:
                # Unfinished, it shows as abandoned at once (nobody works on it now); finished, no change.
                self.ledger.release_run_lease(self.record.run_id, self.owner)
        except ShardwiseError as exc:
            _log.warning(
                "run %s: releasing its lease failed (it expires soon anyway): %s", self.record.run_id, exc
            )
        try:
            if self.source is not None:
                self.source.close()
        except ShardwiseError as exc:
            _log.warning("run %s: releasing the planning snapshot failed: %s", self.record.run_id, exc)
        finally:
            try:
                if self.sink is not None:
                    self.sink.close()
            finally:
                self.ledger.close()


def prepare_run(
    spec: RunSpec,
    *,
    run_id: str,
    started_by: str,
    parameters: Mapping[str, Any],
    model: ModelInfo,
    cache: WorkerCache,
    resolve: Resolver = as_is,
    workers: int = 1,
    threads: int | None = None,
) -> PlannedRun:
    """Plan the source (or load a resumed run's record and plan) and record the run in the ledger.

    ``workers`` is how many workers will score it: the default sizing gives
    each at least :data:`SHARDS_PER_WORKER` shards. ``threads`` is each
    worker's torch thread count, carried in the run reference. A new run's
    precision is chosen here, once, behind the accuracy guard (see
    :func:`~shardwise.pipeline.run_precision.choose_precision`), which loads the
    model into ``cache`` only for a reduced precision; a resumed run keeps
    the precision it was started with.

    This process takes the run's lease, and renews it from a background
    thread until :func:`finish_run` or :meth:`PlannedRun.close`. Resuming a
    run whose lease another process holds raises a :class:`ConfigError`
    unless ``spec.run.force``, or unless that process ran on this host and is
    gone (see :func:`~shardwise.pipeline.lease.takeover_from`).
    """
    place = results_place(spec, resolve(spec.results_location))
    place.check()
    spec.check_model(model)
    ledger = Ledger(ledger_url(spec, resolve, create=True), timeout_s=spec.run.retry.db_timeout_s)
    owner, took_over = this_worker().worker, None
    sink: Sink | None = None
    try:
        if spec.run.resume:
            record, plan, took_over = resume_run(spec, ledger, model, resolve, owner)
            source = None
            sink = place.open(place.layout(model.outputs, plan))
        else:
            choice = choose_precision(spec, cache)
            record, plan, source, sink = _plan_new(
                spec, place, ledger, model, choice, resolve, run_id, started_by, parameters, workers, owner,
                cache,
            )  # fmt: skip
        done = frozenset(ledger.done_shards(record.run_id))
        before = _counts_now(ledger, record.run_id)
        tidied = tidy_leftovers(ledger, sink)  # after the lease: this run's own files are a live run's
    except BaseException:
        if sink is not None:
            sink.close()
        ledger.close()
        raise
    todo = tuple(s.shard_id for s in plan.shards if s.shard_id not in done)
    ref = RunRef(record.run_id, recorded_chunks(recorded_retry(spec, plan, record.run_id), plan), threads)
    keeper = run_lease_keeper(ledger, record.run_id, owner, spec.run.lease_s).start()
    return PlannedRun(
        ref, record, plan, model, todo, done, ledger, source, owner, keeper, took_over, sink, before,
        tuple(tidied),
    )  # fmt: skip


def _counts_now(ledger: Ledger, run_id: str) -> RunCounts:
    """The run's counts as the ledger sums them now (live: it is running, this process holds it)."""
    summary = ledger.run_summary(run_id)
    assert summary is not None  # recorded just before
    return summary.counts


def _plan_new(
    spec: RunSpec,
    place: ResultsPlace,
    ledger: Ledger,
    model: ModelInfo,
    choice: PrecisionChoice,
    resolve: Resolver,
    run_id: str,
    started_by: str,
    parameters: Mapping[str, Any],
    workers: int,
    owner: str,
    cache: WorkerCache,
) -> tuple[RunRecord, SourcePlan, Source, Sink]:
    source: Source = open_spec_source(spec, resolve)
    sink: Sink | None = None
    try:
        check_model_inputs(model, source.value_kind())  # a run from the UI or the API skips check_run
        target = place.recorded()  # as the run records it
        if spec.run.redrive is not None:
            source = redrive_plan_source(spec, source, ledger, run_id, target)
        version = versioned(model.version, choice.precision)
        asker = (
            only_new_sink(place, resolve(spec.source.location), source, model.outputs)
            if spec.run.only_new
            else None
        )
        try:
            shards = SHARDS_PER_WORKER * workers
            plan = plan_source(spec, source, version, ledger, sink=asker, target=target, min_shards=shards)
        finally:
            if asker is not None:
                asker.close()
        # A source given as env:NAME is recorded by that name (and a fingerprint), never its value; the
        # workers read the stored plan with the identity they resolve (see worker.py).
        identity = by_reference(spec.source.location, source.identity)
        params = {**plan.params, "retry": spec.run.retry.to_params()}
        if params.get("location") == source.identity:  # a Parquet or image folder plan names it again
            params["location"] = identity
        plan = dataclasses.replace(plan, identity=identity, params=params)
        # Before the run is recorded: a budget the plan cannot size a first chunk for is refused.
        plan = sized_plan(plan, _budget_chunks(spec, source, plan, model, choice, ledger, cache))
        sink = place.open(place.layout(model.outputs, plan))
        ResultStore(ledger, sink).ensure_schema()
        record = RunRecord(
            run_id=run_id,
            started_by=started_by,
            parameters=dict(parameters),
            model_name=model.name,
            model_version=version,
            precision=choice.precision,
            precision_agreement=choice.agreement,
            precision_agreement_from=_agreement_from(choice),
            code_version=code_version(),
            source_identity=identity,
            source_snapshot=plan.snapshot,
            results_table=sink.target,
        )
        # A run id already stored (a retried flow run) keeps its stored record and plan.
        record, plan = ledger.start_run(record, plan, owner=owner, lease_s=spec.run.lease_s)
    except BaseException:
        if sink is not None:
            sink.close()
        source.close()
        raise
    return record, plan, source, sink


def _budget_chunks(
    spec: RunSpec,
    source: Source,
    plan: SourcePlan,
    info: ModelInfo,
    choice: PrecisionChoice,
    ledger: Ledger,
    cache: WorkerCache,
) -> int | None:
    """A budgeted run's chunk rows, from the plan's estimate (see :mod:`.budget_chunks`); None without a
    budget. The model loads as a worker of this process would load it (a thread runner's shards find it)."""
    if Budget.of(spec.run.budget_usd, spec.run.budget_tokens) is None:
        return None
    model_spec = cache.spec(spec.model, spec.run.retry)
    _, device = hardware_precision(spec, info)
    loaded: Loaded | None = (
        None if info.batches_itself else cache.model(spec.model, device, spec.run.retry)[0]
    )
    counter = model_spec.prompt_counter() if isinstance(model_spec, PromptCounting) else None
    speed = calibrated(cache.calibration, loaded, choice.precision, device, spec)
    counted = loaded if counter is None else counter
    tokens, cost = estimate_run(spec, source, plan, counted, info, earlier_runs(ledger), speed)
    return budget_chunk_rows(spec, tokens, cost, chunk_rows(spec, model_spec))


def _agreement_from(choice: PrecisionChoice) -> str | None:
    if choice.agreement is None:
        return None
    return "cache" if choice.cached else "measured"


def finish_run(planned: PlannedRun, failed_shards: list[int]) -> RunCounts:
    """Close the run in the ledger and release its lease; on success, remember the objects scored
    (a plan that reads objects: Parquet, CSV, an image folder).

    A run another process took over meanwhile (a forced resume) is that
    process's to finish: a :class:`~shardwise.errors.RunTakenOverError` says so.
    """
    status: Literal["completed", "failed"] = "failed" if failed_shards else "completed"
    record, plan = planned.record, planned.plan
    if planned.keeper is not None:
        planned.keeper.stop()  # no renewal may land after the lease is released
    run = planned.ref.spec.run
    budget = Budget.of(run.budget_usd, run.budget_tokens)
    counts = planned.ledger.finish_run(record.run_id, status, owner=planned.owner, budget=budget)
    # A keyed (redrive) plan read some rows of its objects, not the objects: they are not "seen".
    if status == "completed" and plan.by_objects and not is_keyed(plan):
        planned.ledger.record_objects(record.run_id, record.source_identity, plan_objects(plan))
    return counts


def finish_results(planned: PlannedRun) -> list[str]:
    """The sink's work after a completed run (an ANN index, with its build time): what it did, a line
    each. Idempotent, so it is safe to call again after a failure. Call it after :func:`finish_run`."""
    return [] if planned.sink is None else planned.sink.finish(planned.record.run_id)


def score_pending(planned: PlannedRun, cache: WorkerCache, *, resolve: Resolver = as_is) -> RunCounts:
    """Score every pending shard in this thread, then finish the run: the path without an orchestrator.
    Then call :func:`finish_results` for the sink's work after the run (an ANN index), as the flow does.

    A shard that raises is marked failed, the run is finished as failed, and
    the error propagates; the finished shards stay merged, so a later run with
    ``resume`` completes it.
    """
    for shard_id in planned.todo:
        try:
            score_ref_shard(planned.ref, shard_id, cache, resolve=resolve)
        except Exception as exc:
            planned.ledger.mark_shard_failed(planned.record.run_id, shard_id, str(exc))
            finish_run(planned, [shard_id])
            raise
    return finish_run(planned, [])
