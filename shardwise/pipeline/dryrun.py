"""``shardwise plan``: what a run would do, without doing it.

:func:`plan_report` plans the source as a run would, estimates the tokens from
a sample of rows, counts what ``--only-new`` would skip and lists the runs
into the same results table still marked running. It estimates what the run
will cost too: its prompt tokens counted exactly, its completion tokens'
bound, device-hours and dollars (:mod:`shardwise.pipeline.estimate`).
Nothing is written.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from itertools import islice
from typing import Any

import torch

from shardwise.cost.prices import Pricing
from shardwise.db.codec import utc_now
from shardwise.errors import ConfigError, InputError
from shardwise.model import Loaded, PromptCounting, SelfBatching
from shardwise.model.converted import ConvertedCache, kept_in
from shardwise.model.generation import PromptChecked
from shardwise.pipeline.destination import (
    check_destination,
    ledger_url,
    only_new_sink,
    results_target,
)
from shardwise.pipeline.estimate import CostEstimate, TokenCount, count_tokens, estimate_cost
from shardwise.pipeline.model_inputs import check_model_inputs
from shardwise.pipeline.resume import resume_command
from shardwise.pipeline.run_precision import hardware_precision
from shardwise.pipeline.source_plan import SHARDS_PER_WORKER, plan_source
from shardwise.pipeline.spec import Resolver, RunSpec
from shardwise.pipeline.worker import Catalogue, chosen_spec, open_spec_source
from shardwise.precision import Precision, versioned
from shardwise.precision.calibration import CalibrationCache, Speed, calibration_key
from shardwise.results import Ledger
from shardwise.results.leases import abandoned_why, when
from shardwise.results.probe import check_ledger
from shardwise.secrets.by_reference import by_reference
from shardwise.secrets.redact import redact
from shardwise.sources import Source, SourcePlan
from shardwise.words import plural

__all__ = ["PlanPreview", "plan_report", "preview_plan"]

_SAMPLE_SHARDS = 4
_SAMPLE_ROWS = 64


@dataclass(frozen=True)
class PlanPreview:
    plan: SourcePlan
    tokens_per_row: float
    """Mean tokens per row (special tokens included, after truncation) over a sample of rows."""
    sampled_rows: int

    @property
    def estimated_tokens(self) -> int:
        return round(self.tokens_per_row * self.plan.expected_rows)


def preview_plan(source: Source, plan: SourcePlan, model: Loaded | None) -> PlanPreview:
    """Estimate tokens (the model's item cost) from the first rows of a few evenly spaced shards.

    Each sampled row goes through the model's ``prepare``, as in a run; rows
    it refuses are left out. Nothing is written. A model that batches by itself
    (or none loaded) has no item cost to sample: no estimate.
    """
    if model is None or isinstance(model, SelfBatching):
        return PlanPreview(plan, 0.0, 0)
    shards = plan.shards
    step = max(1, len(shards) // _SAMPLE_SHARDS)
    costs: list[int] = []
    for shard in shards[::step][:_SAMPLE_SHARDS]:
        with source.open_reader(plan, shard) as reader:
            for row in islice(reader.rows, _SAMPLE_ROWS):
                try:
                    costs.append(model.prepare(row.value).cost)
                except InputError:
                    continue
    mean = statistics.fmean(costs) if costs else 0.0
    return PlanPreview(plan, mean, len(costs))


def plan_report(
    spec: RunSpec,
    catalogue: Catalogue,
    resolve: Resolver,
    workers: int = 1,
    calibration: CalibrationCache | None = None,
    converted: ConvertedCache | None = None,
) -> dict[str, Any]:
    """Shards, rows, estimated tokens and rows already scored, for ``spec``; nothing is written.

    ``catalogue`` looks the model up (``models.get_spec``) and ``resolve``
    turns connection names into URLs, as for a run.

    The tokenizer estimates the tokens, so the model is loaded, on the CPU (a GGUF file from
    ``converted``, where it is kept de-quantised: see :mod:`shardwise.model.converted`); a model that
    batches by itself is not (its spec counts its prompts, see :mod:`shardwise.pipeline.estimate`).
    ``workers`` sizes the default shard count as the run would. The precision
    is the hardware's choice; the run's accuracy guard may still send it back
    to fp32 (and so to the fp32 version's already-scored rows). ``calibration`` is where this host's
    calibration passes are cached: with no earlier run, the device-hours come from one there.
    """
    spec_of = chosen_spec(catalogue, spec.model, resolve, spec.run.retry)
    if isinstance(spec_of, PromptChecked):
        spec_of.check_prompts()  # as a run does, before the preview renders prompts of its own
    info = spec_of.describe()
    # A model that batches by itself is not loaded (no vLLM engine built, no endpoint asked): its spec's
    # prompt counter counts what it would send.
    model: Loaded | None = (
        None if info.batches_itself else kept_in(spec_of, converted).load(torch.device("cpu"))
    )
    counter = spec_of.prompt_counter() if isinstance(spec_of, PromptCounting) else None
    precision, device = hardware_precision(spec, info)
    version = versioned(info.version, precision)
    results_url = resolve(spec.results.location)
    check_destination(spec, results_url)
    source = open_spec_source(spec, resolve)
    ledger_at = ledger_url(spec, resolve)
    check_ledger(ledger_at, "readable")
    ledger = Ledger(ledger_at)
    asks = only_new_sink(spec, resolve, source, info.outputs)
    try:
        check_model_inputs(info, source.value_kind())  # what the run would refuse, a plan refuses
        target = results_target(spec, results_url)
        recorded = by_reference(spec.results.location, target)  # the destination as a run records it
        plan = plan_source(
            spec, source, version, ledger, sink=asks, target=recorded, min_shards=SHARDS_PER_WORKER * workers
        )
        preview = preview_plan(source, plan, model)
        tokens = count_tokens(source, plan, model if counter is None else counter)
        pricing = Pricing(info.name, spec.run.device_price_per_hour, batch=info.batch_priced)
        speed = _calibrated(calibration, model, precision, device, spec)
        cost = estimate_cost(tokens, pricing, ledger.recent_runs(50, status="completed"), speed)
        try:
            new_only = dataclasses.replace(spec, run=dataclasses.replace(spec.run, only_new=True))
            current = (
                plan
                if spec.run.only_new
                else plan_source(new_only, source, version, ledger, sink=asks, target=recorded)
            )
            already = str(int(current.params.get("skipped_rows") or 0))
        except ConfigError as exc:
            already = f"unknown ({redact(str(exc))})"  # a report: it names a reference, not its value
        unfinished = _unfinished(spec, ledger, recorded, target)
    finally:
        source.close()
        ledger.close()
        if asks is not None:
            asks.close()
    sizes = [s.expected_rows for s in plan.shards]
    return {
        "source": by_reference(spec.source.location, plan.identity),
        "snapshot": plan.snapshot or "none",
        "shards": len(sizes),
        "rows": plan.expected_rows,
        "rows_per_shard_min": min(sizes, default=0),
        "rows_per_shard_max": max(sizes, default=0),
        "estimated_tokens": preview.estimated_tokens,
        "tokens_per_row": round(preview.tokens_per_row, 1),
        "model": f"{info.name} {info.version[:12]}",
        "precision": precision,
        "only_new": spec.run.only_new,
        "rows_already_scored": already,
        "rows_null_key": int(plan.params.get("null_keys") or 0),
        "unfinished_runs": unfinished,
        **_cost_keys(tokens, cost),
    }


def _cost_keys(tokens: TokenCount | None, cost: CostEstimate) -> dict[str, Any]:
    """What the run will cost (:mod:`shardwise.pipeline.estimate`): tokens, device-hours and dollars; None
    where unknown."""
    return {
        "prompt_tokens": None if tokens is None else tokens.prompt_tokens,
        "prompt_tokens_counted": "not counted: the model batches by itself and counts no prompts ahead"
        if tokens is None
        else tokens.describe(),
        "max_completion_tokens": None if tokens is None else tokens.max_completion_tokens,
        "device_hours": cost.device_hours,
        "device_hours_from": cost.hours_from,
        "device_hours_low": cost.device_hours_low,
        "device_hours_high": cost.device_hours_high,
        "cost_usd_low": cost.cost_usd_low,
        "cost_usd_high": cost.cost_usd_high,
        "cost_basis": cost.basis,
    }


def _calibrated(
    store: CalibrationCache | None,
    model: Loaded | None,
    precision: Precision,
    device: torch.device,
    spec: RunSpec,
) -> Speed | None:
    """The speed a cached calibration pass measured for the run's model, device and precision; None when
    there is none, or the device is not the run's (a CPU-only process planning for GPU workers)."""
    if store is None or model is None or (spec.run.device.startswith("cuda") and device.type != "cuda"):
        return None
    pairs = spec.source.text_pair_column is not None
    return store.speed(calibration_key(model, precision, pairs, device))


def _unfinished(spec: RunSpec, ledger: Ledger, *results_tables: str) -> list[str]:
    """Runs into the same results table still marked running: live ones, and abandoned ones to resume.

    The table as runs record it now, and in clear as runs recorded a location given by reference before
    (see :mod:`shardwise.secrets.by_reference`). Each abandoned one comes with the command that resumes it.
    """
    now, found = utc_now(), []
    running = [
        run
        for results_table in dict.fromkeys(results_tables)
        for run in ledger.recent_runs(10, status="running", results_table=results_table)
    ]
    for run in running:
        done = f"{run.counts.shards_done}/{plural(run.counts.shards_total, 'shard')} done"
        if run.state(now) == "abandoned":
            why = abandoned_why(run.owner, run.lease_expires_at, now)
            finish = resume_command(
                run.run_id, ledger=spec.ledger, results=spec.results.location, source=spec.source.location
            )
            found.append(
                f"run {run.run_id} is abandoned ({done}; {why}): "
                f"finish it with {finish} rather than scoring its rows again"
            )
        else:
            holder = f"on {run.owner}, lease until {when(run.lease_expires_at)}" if run.owner else "no lease"
            found.append(
                f"run {run.run_id} is still running ({holder}; {done}): a new run now would score the "
                "same rows again"
            )
    return found
