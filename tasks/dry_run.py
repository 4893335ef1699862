"""``dry-run``: plan a run and report it, writing nothing."""

from __future__ import annotations

import dataclasses
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from shardwise.device import resolve_device
from shardwise.errors import ConfigError
from shardwise.pipeline import RunSpec, open_run_source, plan_source, preview_plan
from tasks.artifacts import publish_plan
from tasks.models import load_model

__all__ = ["dry_run", "plan_report"]


def plan_report(spec: RunSpec) -> dict[str, Any]:
    """Shards, rows, estimated tokens and rows already scored, for ``spec``; nothing is written."""
    model = load_model(spec.model, resolve_device(spec.device))
    source = open_run_source(spec)
    try:
        plan = plan_source(spec, source, model)
        preview = preview_plan(source, plan, model)
        try:
            current = (
                plan
                if spec.only_new
                else plan_source(dataclasses.replace(spec, only_new=True), source, model)
            )
            already = str(int(current.params.get("skipped_rows") or 0))
        except ConfigError as exc:
            already = f"unknown ({exc})"
    finally:
        source.close()
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
        "only_new": spec.only_new,
        "rows_already_scored": already,
    }


@task(name="dry-run", cache_policy=NO_CACHE)
def dry_run(spec: RunSpec) -> dict[str, Any]:
    report = plan_report(spec)
    publish_plan(report)
    get_run_logger().info("dry run: %s", report)
    return report
