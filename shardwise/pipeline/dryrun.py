"""``shardwise plan``: what a run would do, without doing it.

:func:`plan_report` plans the source as a run would, counts what
``--only-new`` would skip and lists the runs into the same results table
still marked running. It estimates what the run will cost: its prompt
tokens counted exactly, its completion tokens' bound, device-hours and
dollars (:mod:`shardwise.pipeline.estimate`), and, given a budget, whether
it covers them and the chunk the run would cut for it
(:mod:`shardwise.pipeline.budget_chunks`). Nothing is written.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from shardwise.db.codec import utc_now
from shardwise.errors import ConfigError
from shardwise.model import Loaded, PromptCounting
from shardwise.model.converted import ConvertedCache, kept_in
from shardwise.model.generation import PromptChecked
from shardwise.pipeline.budget_chunks import budget_chunk_rows, calibrated, earlier_runs, estimate_run
from shardwise.pipeline.destination import ledger_url, only_new_sink, results_place
from shardwise.pipeline.estimate import CostEstimate, TokenCount
from shardwise.pipeline.model_inputs import check_model_inputs
from shardwise.pipeline.resume import resume_command
from shardwise.pipeline.run_precision import hardware_precision
from shardwise.pipeline.skipped import Skipped
from shardwise.pipeline.source_plan import SHARDS_PER_WORKER, plan_source
from shardwise.pipeline.spec import Resolver, RunSpec
from shardwise.pipeline.worker import Catalogue, chosen_spec, chunk_rows, open_spec_source
from shardwise.precision import versioned
from shardwise.precision.calibration import CalibrationCache
from shardwise.results import Ledger
from shardwise.results.leases import abandoned_why, when
from shardwise.results.probe import check_ledger
from shardwise.secrets.by_reference import by_reference
from shardwise.secrets.redact import redact
from shardwise.words import plural

__all__ = ["plan_report"]


def plan_report(
    spec: RunSpec,
    catalogue: Catalogue,
    resolve: Resolver,
    workers: int = 1,
    calibration: CalibrationCache | None = None,
    converted: ConvertedCache | None = None,
) -> dict[str, Any]:
    """Shards, rows, rows already scored, cost and budget, for ``spec``; nothing is written.

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
    kept = kept_in(spec_of, converted)  # a GGUF file's tokenizer from its kept conversion, as a run's
    model: Loaded | None = None if info.batches_itself else kept.load(torch.device("cpu"))
    counter = kept.prompt_counter() if isinstance(kept, PromptCounting) else None
    precision, device = hardware_precision(spec, info)
    version = versioned(info.version, precision)
    results_url = resolve(spec.results_location)
    place = results_place(spec, results_url)
    place.check()
    source = open_spec_source(spec, resolve)
    ledger_at = ledger_url(spec, resolve)
    check_ledger(ledger_at, "readable")
    ledger = Ledger(ledger_at)
    asks = only_new_sink(place, resolve(spec.source.location), source, info.outputs)
    try:
        check_model_inputs(info, source.value_kind())  # what the run would refuse, a plan refuses
        target = place.target()
        recorded = by_reference(spec.results_location, target)  # the destination as a run records it
        plan = plan_source(
            spec, source, version, ledger, sink=asks, target=recorded, min_shards=SHARDS_PER_WORKER * workers
        )
        speed = calibrated(calibration, model, precision, device, spec)
        counted = model if counter is None else counter
        tokens, cost = estimate_run(spec, source, plan, counted, info, earlier_runs(ledger), speed)
        # The run's own chunk sizing: a budget the run would refuse, the plan refuses.
        budget_rows = budget_chunk_rows(spec, tokens, cost, chunk_rows(spec, spec_of))
        try:
            new_only = dataclasses.replace(spec, run=spec.run.replace(only_new=True))
            current = (
                plan
                if spec.run.only_new
                else plan_source(new_only, source, version, ledger, sink=asks, target=recorded)
            )
            skips: Skipped | None = Skipped.of(current)
            unknown = None
        except ConfigError as exc:
            skips, unknown = None, redact(str(exc))  # a report: it names a reference, not its value
        unfinished = _unfinished(spec, ledger, recorded, target)
    finally:
        source.close()
        ledger.close()
        if asks is not None:
            asks.close()
    sizes = [s.expected_rows for s in plan.shards]
    planned = Skipped.of(plan)
    return {
        "source": by_reference(spec.source.location, plan.identity),
        "snapshot": plan.snapshot or "none",
        "shards": len(sizes),
        "rows": plan.expected_rows,
        "rows_per_shard_min": min(sizes, default=0),
        "rows_per_shard_max": max(sizes, default=0),
        "model": f"{info.name} {info.version[:12]}",
        "precision": precision,
        "only_new": spec.run.only_new,
        # A plan by objects skips whole files a completed run read: their rows scored or dead-lettered.
        "rows_already_scored": None if skips is None else skips.already_scored,
        "rows_already_read": None if skips is None else skips.already_read,
        "rows_already_scored_unknown": unknown,
        "rows_null_key": planned.null_key,
        "rows_unparsable": planned.unparsable,
        "unfinished_runs": unfinished,
        **_cost_keys(tokens, cost),
        **_budget_keys(spec, tokens, cost, budget_rows),
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


def _budget_keys(
    spec: RunSpec, tokens: TokenCount | None, cost: CostEstimate, chunk_rows: int | None
) -> dict[str, Any]:
    """The budgets given, whether each covers the estimate (``yes``: its high end, ``no``: not even its low
    end, ``perhaps``: between them; None without that budget) and the rows of a budgeted run's chunks."""
    usd, budget_tokens = spec.run.budget_usd, spec.run.budget_tokens
    low_tokens = None if tokens is None else tokens.prompt_tokens
    high_tokens = None if tokens is None else tokens.prompt_tokens + (tokens.max_completion_tokens or 0)
    return {
        "budget_usd": usd,
        "budget_usd_covers": _covers(usd, cost.cost_usd_low, cost.cost_usd_high),
        "budget_tokens": budget_tokens,
        "budget_tokens_covers": _covers(budget_tokens, low_tokens, high_tokens),
        "budget_chunk_rows": chunk_rows,
    }


def _covers(budget: float | None, low: float | None, high: float | None) -> str | None:
    if budget is None or low is None or high is None:
        return None
    return "yes" if high <= budget else "no" if low > budget else "perhaps"


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
                run.run_id, ledger=spec.ledger, results=spec.results_location, source=spec.source.location
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
