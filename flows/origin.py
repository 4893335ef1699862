"""How a flow run was started, for the ledger: ``cli``, ``manual``, ``schedule`` or ``event:<id>``."""

from __future__ import annotations

from prefect.runtime import deployment, flow_run

from shardwise.flows.params import ScoreParams

__all__ = ["started_by"]


def started_by(params: ScoreParams) -> str:
    """Event-triggered runs carry their event id; deployment runs are told apart by the API's record."""
    if params.triggered_by:
        return f"event:{params.triggered_by}"
    if not deployment.id:
        return "cli"
    from prefect import get_client

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run.id)
    if run.auto_scheduled:
        return "schedule"
    creator = run.created_by
    if creator is not None and creator.type == "AUTOMATION":
        return f"automation:{creator.display_value or creator.id}"
    return "manual"
