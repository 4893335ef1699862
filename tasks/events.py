"""Events Shardwise emits so users can chain automations on a finished run."""

from __future__ import annotations

from prefect.events import emit_event

from shardwise.pipeline.run_result import PAYLOAD_KEYS, RunResult

__all__ = ["PAYLOAD_KEYS", "emit_run_finished"]


def emit_run_finished(result: RunResult, source_name: str) -> None:
    """``shardwise.run.completed`` or ``shardwise.run.failed``, about the run, related to its source; its
    payload is :meth:`~shardwise.pipeline.run_result.RunResult.event_payload` (keys :data:`PAYLOAD_KEYS`)."""
    status = "completed" if result.status == "completed" else "failed"
    emit_event(
        event=f"shardwise.run.{status}",
        resource={
            "prefect.resource.id": f"shardwise.run.{result.run_id}",
            "prefect.resource.name": f"shardwise run {result.run_id}",
        },
        related=[
            {"prefect.resource.id": f"shardwise.source.{source_name}", "prefect.resource.role": "source"}
        ],
        payload=result.event_payload(),
    )
