"""A budgeted run's chunk size, from what the plan knows, so that its first chunk holds the budget too.

The run's first chunk is scored before anything is measured (see
:mod:`shardwise.cost.budget`): only the plan can bound it. So a run with
``--budget-usd`` or ``--budget-tokens`` counts its prompt tokens and
estimates its cost as ``shardwise plan`` does (:mod:`.estimate`: earlier
runs, a calibration pass, counted tokens at the price), takes a row's cost
at the high end of that estimate, and cuts chunks of as many rows as a tenth
of the budget pays for (never more than the model's own chunk). The size
is recorded in the run's plan (``params["chunk_rows"]``) and every worker,
and every resume, cuts chunks of it: chunk boundaries are the plan's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from shardwise.batch.config import EngineConfig
from shardwise.cost.budget import Budget, chunk_rows_within
from shardwise.cost.prices import Pricing
from shardwise.model import Loaded, ModelInfo, PromptCounter
from shardwise.pipeline.estimate import CostEstimate, TokenCount, count_tokens, estimate_cost, row_high
from shardwise.pipeline.spec import RunSpec
from shardwise.precision import Precision
from shardwise.precision.calibration import CalibrationCache, Speed, calibration_key
from shardwise.results import Ledger
from shardwise.results.outcomes import RunListing
from shardwise.sources import Source, SourcePlan

__all__ = [
    "EARLIER_RUNS",
    "budget_chunk_rows",
    "calibrated",
    "earlier_runs",
    "estimate_run",
    "recorded_chunks",
    "sized_plan",
]

EARLIER_RUNS = 50
"""The ledger's latest completed runs an estimate reads seconds per row from."""


def estimate_run(
    spec: RunSpec,
    source: Source,
    plan: SourcePlan,
    model: Loaded | PromptCounter | None,
    info: ModelInfo,
    earlier: Sequence[RunListing],
    speed: Speed | None,
) -> tuple[TokenCount | None, CostEstimate]:
    """The planned rows' prompt tokens counted with ``model`` (its prompt counter, for a model that batches
    by itself), and the run's cost estimated from them, ``earlier`` runs and ``speed``."""
    tokens = count_tokens(source, plan, model)
    pricing = Pricing(info.name, spec.run.device_price_per_hour, batch=info.batch_priced)
    return tokens, estimate_cost(tokens, pricing, earlier, speed)


def calibrated(
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


def budget_chunk_rows(spec: RunSpec, tokens: TokenCount | None, cost: CostEstimate, rows: int) -> int | None:
    """Rows a chunk of ``spec``'s run may hold so that it spends at most a tenth of each budget given, at
    most ``rows`` (the model's chunk); None without a budget. A :class:`~shardwise.errors.ConfigError`
    when the plan cannot size it (see :func:`~shardwise.cost.budget.chunk_rows_within`)."""
    budget = Budget.of(spec.run.budget_usd, spec.run.budget_tokens)
    if budget is None:
        return None
    usd, per_row = row_high(tokens, cost)
    why = (cost.hours_from if usd is None and cost.hours_from else cost.basis).removeprefix("unknown: ")
    fits = chunk_rows_within(budget, usd, per_row, rows, why)
    window = EngineConfig().window_rows
    return fits - fits % window if fits > window else fits  # a chunk ends where an engine window ends


def recorded_chunks(spec: RunSpec, plan: SourcePlan) -> RunSpec:
    """``spec`` with the chunk size its run's plan recorded (a budgeted run's); as given otherwise."""
    rows = plan.param("chunk_rows")
    if not isinstance(rows, int) or rows == spec.chunk_rows:
        return spec
    return dataclasses.replace(spec, chunk_rows=rows)


def sized_plan(plan: SourcePlan, rows: int | None) -> SourcePlan:
    """``plan`` recording a budgeted run's chunk size ``rows`` (None: nothing to record)."""
    if rows is None:
        return plan
    return dataclasses.replace(plan, params={**plan.params, "chunk_rows": rows})


def earlier_runs(ledger: Ledger) -> list[RunListing]:
    """The ledger's latest completed runs, which an estimate reads seconds per row from."""
    return ledger.recent_runs(EARLIER_RUNS, status="completed")
