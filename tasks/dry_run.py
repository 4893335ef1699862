"""``dry-run``: plan a run and report it, writing nothing."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from shardwise.model.converted import ConvertedCache
from shardwise.models import get_spec
from shardwise.pipeline import RunSpec, plan_report
from shardwise.precision.calibration import CalibrationCache
from shardwise.tasks.artifacts import publish_plan
from shardwise.tasks.connections import resolve

__all__ = ["dry_run"]


@task(name="dry-run", cache_policy=NO_CACHE)
def dry_run(
    spec: RunSpec,
    workers: int = 1,
    calibration: CalibrationCache | None = None,
    converted: ConvertedCache | None = None,
) -> dict[str, Any]:
    """The plan report (:func:`shardwise.pipeline.plan_report`; ``calibration``: this host's cached
    calibration passes; ``converted``: where a GGUF model is kept de-quantised), published as an
    artifact and logged."""
    report = plan_report(spec, get_spec, resolve, workers, calibration=calibration, converted=converted)
    publish_plan(report)
    get_run_logger().info("dry run: %s", report)
    return report
