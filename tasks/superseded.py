"""End the Prefect flow run of a run that a resume took over: Crashed, not Running forever.

A run's id is the id of the flow run that started it. When that process is
killed, nothing tells Prefect: the flow run stays Running. Prefect 3.9's own
answer is a heartbeat (``PREFECT_FLOWS_HEARTBEAT_FREQUENCY``, every 180 s by
default, from every flow run) and an automation on a long-lived server that
marks a flow run Crashed when its heartbeats stop (docs: concepts.md, "Leases"). The
CLI's temporary server dies with the CLI, so nothing could watch its
heartbeats; but its database outlives it, and the next CLI run (the resume)
finds the old flow run there. So whichever server it is, the resume that won
the run's lease marks the old flow run Crashed when it still says Running.
"""

from __future__ import annotations

import logging
from uuid import UUID

from shardwise.pipeline import Takeover

__all__ = ["crash_superseded_flow_run"]

_log = logging.getLogger(__name__)


def crash_superseded_flow_run(run_id: str, took_over: Takeover, resumed_by: str) -> bool:
    """Mark flow run ``run_id`` Crashed if it is still running; whether it did.

    Best effort: a run id that is not a flow run on this server (a run
    started without Prefect, or on another server) is left alone, and an
    error is logged, never raised, since the resume itself is under way.
    """
    from prefect import get_client
    from prefect.exceptions import ObjectNotFound
    from prefect.states import Crashed

    try:
        flow_run_id = UUID(run_id)
    except ValueError:
        return False
    try:
        with get_client(sync_client=True) as client:
            old = client.read_flow_run(flow_run_id)
            if old.state is None or not (old.state.is_running() or old.state.is_pending()):
                return False
            message = (
                f"superseded: run {run_id} was resumed by flow run {resumed_by}; its previous process "
                f"was {took_over.describe()}"
            )
            client.set_flow_run_state(flow_run_id, Crashed(message=message), force=True)
    except ObjectNotFound:
        return False
    except Exception as exc:  # the old flow run's state is a courtesy; the resume goes on
        _log.warning("could not mark flow run %s Crashed after resuming it: %s", run_id, exc)
        return False
    return True
