"""Start the score flow from the command line and report on it; preview a plan without running."""

from __future__ import annotations

import dataclasses
from typing import Any

from flows.params import ScoreParams
from shardwise.errors import ConfigError
from shardwise.model import Model
from shardwise.pipeline import RunSpec, open_run_source, plan_source, preview_plan
from shardwise.redact import redact
from shardwise.sources import Source, SourcePlan

__all__ = ["preflight", "print_plan", "run_and_report"]


def preflight(params: ScoreParams) -> None:
    """Fail fast, before a flow run starts, on a bad model name, table or column."""
    from models import get_spec

    spec = params.to_spec()
    get_spec(spec.model)
    open_run_source(spec).close()


def run_and_report(params: ScoreParams) -> dict[str, Any] | None:
    """Run the flow (ephemeral server, or the one in PREFECT_API_URL); print a summary; None on failure."""
    from flows.score import score

    state = score(params, return_state=True)
    summary = state.result(raise_on_failure=False)
    if not isinstance(summary, dict):
        print(f"shardwise: run failed before any shard ran: {redact(str(summary))}")
        return None
    print(
        f"run {summary['run_id']} {'completed' if state.is_completed() else 'FAILED'}: "
        f"{summary['rows_out']} rows scored ({summary['inserted']} new, {summary['updated']} updated, "
        f"{summary['unchanged']} unchanged), {summary['rows_failed']} dead letters, "
        f"{summary['shards_done']}/{summary['shards_total']} shards done -> table {summary['results_table']}"
    )
    if not state.is_completed():
        print(f"shardwise: {redact(state.message or 'run failed')}")
        print(f"finish it later with: shardwise run ... --resume {summary['run_id']}")
        return None
    return summary


def print_plan(params: ScoreParams) -> None:
    """Print the shard count, rows per shard, estimated tokens and what --only-new would skip."""
    from shardwise.device import resolve_device
    from tasks.models import load_model

    spec = params.to_spec()
    model = load_model(spec.model, resolve_device(spec.device))
    source = open_run_source(spec)
    try:
        plan = plan_source(spec, source, model)
        preview = preview_plan(source, plan, model)
        skipped = _only_new_skips(spec, source, model, plan)
    finally:
        source.close()
    sizes = [s.expected_rows for s in plan.shards]
    print(f"source {plan.identity} (snapshot {plan.snapshot or 'none'})")
    print(f"{len(sizes)} shards, {plan.expected_rows} rows to score")
    if sizes:
        print(f"rows per shard: min {min(sizes)}, max {max(sizes)}, mean {sum(sizes) / len(sizes):.0f}")
    print(
        f"estimated tokens: {preview.estimated_tokens} ({preview.tokens_per_row:.1f} per row over "
        f"{preview.sampled_rows} sampled rows, model {model.name})"
    )
    print(f"--only-new {'skips' if spec.only_new else 'would skip'} {skipped}")


def _only_new_skips(spec: RunSpec, source: Source, model: Model, plan: SourcePlan) -> str:
    """How many rows already have a current result, phrased for the dry run."""
    if not spec.only_new:
        try:
            spec = dataclasses.replace(spec, only_new=True)
        except ConfigError as exc:
            return f"(cannot tell: {exc})"
        plan = plan_source(spec, source, model)
    return f"{int(plan.params.get('skipped_rows') or 0)} rows that already have a current result"
