"""How a flow run was started: for the ledger (``cli``, ``manual``, ``schedule``, ``event:<id>``), and for
what a run from a deployment may load."""

from __future__ import annotations

import os

from prefect.runtime import deployment, flow_run

from shardwise.flows.params import ScoreParams

__all__ = ["check_model_for_origin", "started_by"]


def check_model_for_origin(model: str) -> None:
    """Refuse, before anything runs, a plug-in module that a run from a deployment may not import.

    A deployment's parameters come from whoever may start it (the UI's form,
    the API), so such a run imports only what the worker's operator allowed
    (see :func:`shardwise.models.check_deployment_model`); the command line
    is the operator's own, and takes any plug-in.
    """
    if not deployment.id:
        return
    from shardwise.models import ALLOW_MODULES_SETTING, check_deployment_model

    check_deployment_model(model, os.environ.get(ALLOW_MODULES_SETTING))


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
