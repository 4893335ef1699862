"""Triggered runs inside ``shardwise serve`` itself, where the model is already loaded.

Prefect's runner starts every flow run in a fresh process (``python -m
prefect.engine``): importing Prefect and torch, then loading the model, costs
seconds per event, more than scoring a few new rows. A deployment with an
event trigger (``on-new-data``) therefore runs here instead: one thread of the
serving process asks the server for its scheduled runs every ``poll_s``,
claims each one (Scheduled → Pending, as the runner does, so the deployment's
concurrency limit and a second ``serve`` are respected) and runs it through
Prefect's own engine (``run_flow``). The run is an ordinary flow run on the
server (states, logs, artifacts), and its shards, on the default thread
runner, find the model in this process's worker cache; the model is loaded
once, when ``serve`` starts (:func:`prewarm`).

How a warm process stays correct when things change:

* **The model.** Every run describes its model afresh (a content hash of its
  files, cheap while their size and mtime stay the same), and the worker cache
  loads it again when that version differs from the one it holds
  (:meth:`~shardwise.pipeline.WorkerCache.refresh`). Device, precision and
  generation settings select entries of their own; the accuracy guard's figures
  are keyed by the model's version.
* **The parameters.** Each run takes its parameters from its flow run on the
  server (rendered from the trigger for that event), never from what ``serve``
  read at start. A run's open source and results store are closed when it ends.
* **The code.** This process runs the code it imported. When a loaded
  ``shardwise`` module changed on disk since, the run goes to a fresh process
  instead, as the runner would start it, and a warning says to restart
  ``serve`` to be warm again.

What it gives up: a run that kills its process (out of memory) takes ``serve``
with it, and a cancel from the UI takes effect only when the run ends. So only
triggered deployments run warm; scheduled and manual runs (large ones) keep a
process each, and ``shardwise serve --cold`` runs every deployment that way.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any
from uuid import UUID

from shardwise.secrets.redact import redact

__all__ = ["CodeStamp", "WarmRuns", "prewarm"]

_log = logging.getLogger("shardwise.serve")


class CodeStamp:
    """The size and mtime of each ``shardwise`` module file this process loaded, when it first saw it.

    :meth:`changed` says whether any of them differs on disk now: the code
    that would run in a fresh process is then not the code running here.
    Modules imported later are noted when first seen.
    """

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, int]] = {}
        self.changed()

    def changed(self) -> bool:
        found = False
        for name, module in list(sys.modules.items()):
            path = getattr(module, "__file__", None)
            if not (name == "shardwise" or name.startswith("shardwise.")) or not path:
                continue
            try:
                stat = os.stat(path)
                now = (stat.st_size, stat.st_mtime_ns)
            except OSError:
                now = (-1, -1)  # deleted since it was loaded
            found |= self._seen.setdefault(path, now) != now
        return found


def prewarm(parameters: Mapping[str, Any]) -> None:
    """Load the model of a deployment's ``params`` (and run its accuracy guard) into this process.

    Best effort, on the caller's thread: parameters that do not validate yet
    (a template the trigger fills in) or a model that fails to load are left
    for the first run to report.
    """
    from shardwise.flows.params import ScoreParams
    from shardwise.tasks.infer_shard import warm_here

    try:
        params = ScoreParams.model_validate(dict(parameters.get("params") or {}))
    except ValueError as exc:  # its message could quote a value: name the error only
        _log.debug("not prewarming: the parameters do not validate (%s)", type(exc).__name__)
        return
    warm_here(params.to_spec())


class WarmRuns:
    """Runs the scheduled flow runs of ``flows`` (deployment id → flow) on a thread of this process.

    ``warm_up`` runs first on that thread (the model loads while the runner
    starts). One run at a time, oldest first; :meth:`stop` lets the run in
    flight end.
    """

    def __init__(
        self, flows: Mapping[UUID, Any], poll_s: float, warm_up: Callable[[], None] | None = None
    ) -> None:
        self._flows = dict(flows)
        self._warm_up = warm_up
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._code = CodeStamp()
        self._thread = threading.Thread(target=self._loop, name="shardwise-warm-runs", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Take no new run, and wait up to ``timeout`` seconds for the one in flight."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        from prefect.client.orchestration import get_client

        if self._warm_up is not None:
            try:  # a run that is due meanwhile waits for the model it would load itself
                self._warm_up()
            except Exception as exc:  # the first run loads the model and reports what is wrong
                _log.warning("warm runs: prewarming failed (%s)", redact(f"{type(exc).__name__}: {exc}"))
        while not self._stop.is_set():
            try:  # a new client after an error: the server may have restarted
                with get_client(sync_client=True) as client:
                    while not self._stop.is_set():
                        self._run_due(client)
                        self._stop.wait(self._poll_s)
            except Exception as exc:  # keep serving, and say so
                _log.warning(
                    "warm runs: could not read or start scheduled runs (%s); trying again", redact(str(exc))
                )
                self._stop.wait(self._poll_s)

    def _run_due(self, client: Any) -> None:
        due = client.get_scheduled_flow_runs_for_deployments(
            deployment_ids=list(self._flows), scheduled_before=datetime.now(timezone.utc)
        )
        for flow_run in sorted(due, key=lambda r: r.next_scheduled_start_time or r.created):
            if self._stop.is_set():
                return
            if _claim(client, flow_run.id):
                self._run(client.read_flow_run(flow_run.id))

    def _run(self, flow_run: Any) -> None:
        """Run ``flow_run`` here, or in a fresh process when the code on disk is not what runs here."""
        if self._code.changed():
            _log.warning(
                "shardwise's code changed on disk since serve started: flow run %s runs in a fresh "
                "process; restart `shardwise serve` to run triggered runs warm again",
                flow_run.id,
            )
            _run_cold(flow_run.id)
            return
        from prefect.flow_engine import run_flow

        try:
            run_flow(self._flows[flow_run.deployment_id], flow_run=flow_run, return_type="state")
        except Exception as exc:  # the engine records the run's final state; serve keeps going
            _log.error(
                "warm flow run %s ended with an error: %s",
                flow_run.id,
                redact(f"{type(exc).__name__}: {exc}"),
            )


def _claim(client: Any, flow_run_id: UUID) -> bool:
    """Scheduled → Pending, as Prefect's runner claims a run; False when the server says not now."""
    from prefect.exceptions import Abort
    from prefect.states import Pending
    from prefect.utilities.engine import propose_state_sync

    try:
        return propose_state_sync(client, Pending(), flow_run_id=flow_run_id).is_pending()
    except Abort:
        return False  # another process claimed it, or it was cancelled


def _run_cold(flow_run_id: UUID) -> int:
    """The runner's own way to run a flow run: ``python -m prefect.engine`` in a fresh process.

    Its environment is this process's, unchanged: connection names resolve in
    the child as they did here, and nothing resolved is added to it.
    """
    env = {**os.environ, "PREFECT__FLOW_RUN_ID": str(flow_run_id)}
    return subprocess.run([sys.executable, "-m", "prefect.engine", str(flow_run_id)], env=env).returncode
