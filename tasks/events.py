"""Events Shardwise emits so users can chain automations on a finished run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefect.events import emit_event

__all__ = ["PAYLOAD_KEYS", "emit_run_finished"]

PAYLOAD_KEYS = (
    "run_id",
    "status",
    "results_table",
    "model",
    "model_version",
    "rows_in",
    "rows_out",
    "rows_failed",
    "rows_skipped",  # neither scored nor dead-lettered: a NULL key, or already scored (pipeline/skipped.py)
    "inserted",
    "updated",
    "unchanged",
    "shards_total",
    "shards_done",
    "shards_failed",
    "counts",  # the whole run's count outputs (completion_tokens, prompt_tokens); {} for an encoder
)


def emit_run_finished(summary: Mapping[str, Any], source_name: str) -> None:
    """``shardwise.run.completed`` or ``shardwise.run.failed``, about the run, related to its source."""
    status = "completed" if summary["status"] == "completed" else "failed"
    emit_event(
        event=f"shardwise.run.{status}",
        resource={
            "prefect.resource.id": f"shardwise.run.{summary['run_id']}",
            "prefect.resource.name": f"shardwise run {summary['run_id']}",
        },
        related=[
            {"prefect.resource.id": f"shardwise.source.{source_name}", "prefect.resource.role": "source"}
        ],
        payload={key: summary[key] for key in PAYLOAD_KEYS},
    )
