"""What ``shardwise serve`` prints about the flow runs it starts: one line for each, when it ends.

A flow run logs to the Prefect server (its log, in the UI or with ``prefect
flow-run logs ID``). Left to Prefect's console handler, each run also
printed its whole log into the ``serve`` terminal: a run that failed on bad
input started from the UI came to 192 lines with two tracebacks there. So,
while ``serve`` runs:

* the flow runs' console output is cut down: in this process (the warm
  runs) a filter on the console handlers keeps only the warnings of the
  ``prefect.flow_runs``, ``prefect.task_runs`` and ``prefect.engine``
  loggers (a changed model loaded again, a shard tried again), and the
  processes Prefect's runner starts inherit
  ``PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL=CRITICAL`` (a level, not a filter,
  is all a child's console takes from its environment, and ERROR would bring
  the tracebacks back); the server still gets every record, at every level;
* :class:`RunLines` asks the server every few seconds which flow runs of the
  served deployments have ended, and prints one line for each: its name, its
  deployment, its final state and message, and for a run that did not
  complete, where its log is.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any
from uuid import UUID

from shardwise.secrets.redact import redact

__all__ = ["RunLines", "run_line", "runs_quiet_on_console"]

_RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs", "prefect.engine")
_CHILD_CONSOLE = "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"


class _NotRunLogs(logging.Filter):
    """Of a run's records, only its warnings (a model loaded again, a shard tried again): its progress
    is in its log, and its errors end in :func:`run_line`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.name.startswith(_RUN_LOGGERS) or record.levelno == logging.WARNING


@contextmanager
def runs_quiet_on_console() -> Iterator[None]:
    """Inside the block, flow runs (here and in the processes started meanwhile) log to the server only."""
    from prefect.logging.configuration import ensure_logging_setup

    ensure_logging_setup()  # Prefect adds its console handler on first use: filter that one
    quiet = _NotRunLogs()
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]
    for handler in handlers:
        handler.addFilter(quiet)
    before = os.environ.get(_CHILD_CONSOLE)
    os.environ[_CHILD_CONSOLE] = "CRITICAL"
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)
        if before is None:
            os.environ.pop(_CHILD_CONSOLE, None)
        else:
            os.environ[_CHILD_CONSOLE] = before


def run_line(name: str, deployment: str, state: str, message: str | None, run_id: UUID | str) -> str:
    """The one line for a flow run that ended (redacted, like every message Shardwise prints)."""
    said = " ".join((message or "").split())
    line = f"run {name} ({deployment}) {state.lower()}"
    if said:
        line += f": {said}"
    if state != "COMPLETED":
        line += f"; its log: prefect flow-run logs {run_id}"
    return redact(line)


class RunLines:
    """A thread that prints :func:`run_line` for each flow run of ``deployments`` ending from now on.

    ``deployments`` maps deployment ids to their names (``flow/deployment``).
    """

    def __init__(self, deployments: dict[UUID, str], poll_s: float) -> None:
        self._deployments, self._poll_s = dict(deployments), max(poll_s, 1.0)
        self._since = datetime.now(timezone.utc)
        self._said: set[UUID] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="shardwise-run-lines", daemon=True)

    def start(self) -> None:
        if self._deployments:
            self._thread.start()

    def stop(self) -> None:
        """Print the runs that ended meanwhile, then stop."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            while True:
                stopping = self._stop.wait(self._poll_s)
                try:
                    for line in self.ended(client):
                        print(line, flush=True)
                except Exception as exc:  # the server may be away a moment: say so, and ask again
                    print(redact(f"could not ask the Prefect server which runs ended: {exc}"), flush=True)
                if stopping:
                    return

    def ended(self, client: Any) -> Sequence[str]:
        """The lines of the runs that ended since the last call (each run once)."""
        from prefect.client.schemas.filters import (
            FlowRunFilter,
            FlowRunFilterDeploymentId,
            FlowRunFilterEndTime,
            FlowRunFilterStateType,
        )
        from prefect.client.schemas.objects import StateType
        from prefect.client.schemas.sorting import FlowRunSort

        final = [StateType.COMPLETED, StateType.FAILED, StateType.CRASHED, StateType.CANCELLED]

        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                deployment_id=FlowRunFilterDeploymentId(any_=list(self._deployments)),
                state={"type": FlowRunFilterStateType(any_=final)},
                end_time=FlowRunFilterEndTime(after_=self._since),
            ),
            sort=FlowRunSort.END_TIME_DESC,
            limit=200,
        )
        lines = []
        for run in reversed(runs):
            if run.id in self._said or run.state is None:
                continue
            self._said.add(run.id)
            deployment = self._deployments.get(run.deployment_id, "?")  # type: ignore[arg-type]
            lines.append(run_line(run.name, deployment, run.state.type.value, run.state.message, run.id))
        return lines
