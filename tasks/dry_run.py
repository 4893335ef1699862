"""``dry-run``: plan a run and report it, writing nothing."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from models import get_spec
from shardwise.errors import ConfigError
from shardwise.pipeline import (
    SHARDS_PER_WORKER,
    RunSpec,
    hardware_precision,
    open_spec_source,
    plan_source,
    preview_plan,
)
from shardwise.precision import versioned
from shardwise.results import Ledger
from shardwise.results.codec import utc_now
from shardwise.results.leases import when
from tasks.artifacts import publish_plan
from tasks.connections import resolve

__all__ = ["dry_run", "plan_report"]


def plan_report(spec: RunSpec, workers: int = 1) -> dict[str, Any]:
    """Shards, rows, estimated tokens and rows already scored, for ``spec``; nothing is written.

    The tokenizer estimates the tokens, so the model is loaded, on the CPU.
    ``workers`` sizes the default shard count as the run would. The precision
    is the hardware's choice; the run's accuracy guard may still send it back
    to fp32 (and so to the fp32 version's already-scored rows).
    """
    spec_of = get_spec(spec.model)
    model = spec_of.load(torch.device("cpu"))
    info = spec_of.describe()
    precision, _ = hardware_precision(spec, info.outputs)
    version = versioned(info.version, precision)
    source = open_spec_source(spec, resolve)
    ledger = Ledger(resolve(spec.results))
    try:
        plan = plan_source(spec, source, version, ledger, min_shards=SHARDS_PER_WORKER * workers)
        preview = preview_plan(source, plan, model)
        try:
            current = (
                plan
                if spec.only_new
                else plan_source(dataclasses.replace(spec, only_new=True), source, version, ledger)
            )
            already = str(int(current.params.get("skipped_rows") or 0))
        except ConfigError as exc:
            already = f"unknown ({exc})"
        unfinished = _unfinished(ledger, spec.results_table)
    finally:
        source.close()
        ledger.close()
    sizes = [s.expected_rows for s in plan.shards]
    return {
        "source": plan.identity,
        "snapshot": plan.snapshot or "none",
        "shards": len(sizes),
        "rows": plan.expected_rows,
        "rows_per_shard_min": min(sizes, default=0),
        "rows_per_shard_max": max(sizes, default=0),
        "estimated_tokens": preview.estimated_tokens,
        "tokens_per_row": round(preview.tokens_per_row, 1),
        "model": f"{model.name} {model.version[:12]}",
        "precision": precision,
        "only_new": spec.only_new,
        "rows_already_scored": already,
        "unfinished_runs": unfinished,
    }


def _unfinished(ledger: Ledger, results_table: str) -> list[str]:
    """Runs into the same results table still marked running: live ones, and abandoned ones to resume."""
    now, found = utc_now(), []
    for run in ledger.recent_runs(10, status="running", results_table=results_table):
        if run.state(now) == "abandoned":
            found.append(
                f"run {run.run_id} is abandoned ({run.shards_done}/{run.shards_total} shards done; its "
                f"lease, held by {run.owner}, expired {when(run.lease_expires_at)}): finish it with "
                f"shardwise run ... --resume {run.run_id} rather than scoring its rows again"
            )
        else:
            holder = f"on {run.owner}, lease until {when(run.lease_expires_at)}" if run.owner else "no lease"
            found.append(
                f"run {run.run_id} is still running ({holder}; {run.shards_done}/{run.shards_total} "
                "shards done): a new run now would score the same rows again"
            )
    return found


@task(name="dry-run", cache_policy=NO_CACHE)
def dry_run(spec: RunSpec, workers: int = 1) -> dict[str, Any]:
    report = plan_report(spec, workers)
    publish_plan(report)
    get_run_logger().info("dry run: %s", report)
    return report
