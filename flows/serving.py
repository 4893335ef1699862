"""``shardwise serve`` and ``shardwise deploy``: the two ways to put the deployments on a Prefect server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from shardwise.errors import ConfigError
from shardwise.flows.deployments import (
    PREFECT_YAML,
    load_deployment_configs,
    load_entrypoint,
    runner_deployments,
    work_pools,
)

if TYPE_CHECKING:
    from prefect.runner import Runner

__all__ = [
    "DEFAULT_POLL_S",
    "deploy_deployments",
    "local_api_url",
    "require_server",
    "serve_deployments",
    "start_worker_command",
]


def local_api_url() -> str:
    """The API address ``prefect server start`` serves on this machine, for messages and help.

    Read from Prefect's own server settings (``127.0.0.1:4200`` unless
    ``PREFECT_SERVER_API_HOST`` or ``PREFECT_SERVER_API_PORT`` say otherwise),
    so that what Shardwise tells a user to export is where the server listens.
    """
    from prefect.settings import get_current_settings

    api = get_current_settings().server.api
    return f"http://{api.host}:{api.port}/api"


def start_worker_command(path: Path = PREFECT_YAML) -> str:
    """How to start a worker for the work pools the deployments of ``path`` name."""
    return " and ".join(f"prefect worker start --pool {pool}" for pool in work_pools(path))


def require_server() -> str:
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise ConfigError(
            "serve, deploy and watch need a running Prefect server (an ephemeral one would vanish with "
            f"this process): run `prefect server start`, then export PREFECT_API_URL={local_api_url()}"
        )
    return str(url)


DEFAULT_POLL_S = 1.0
"""How often ``serve`` asks the server for runs to start (Prefect's runner default is 10 s): a triggered
run waits half of it on average. Each ask is one small request to the API."""


def serve_deployments(
    path: Path | None = None, *, cold: bool = False, poll_s: float = DEFAULT_POLL_S
) -> None:
    """Register every deployment of ``prefect.yaml`` and run their flow runs here until stopped.

    Schedules and event triggers work without a worker. A deployment with an
    event trigger runs warm, in this process, where its model stays loaded
    (:mod:`shardwise.flows.warm_runs`, which says how that stays correct when
    the model, the parameters or the code change); the others, and every one
    with ``cold``, run in a fresh process per flow run, as Prefect's runner
    starts them. ``poll_s`` is how often both ask the server for runs.

    Each flow run logs to the server; this terminal shows one line for each
    run when it ends (:mod:`shardwise.flows.serve_console`).

    However it stops (Ctrl-C, SIGINT or SIGTERM, at any moment: while the
    deployments are being registered, before Prefect's runner has started, or
    after), the served deployments are paused and their schedules made
    inactive, so that nothing is scheduled for a process that is gone; serve
    again to resume them. A warm run in flight is let finish. A second Ctrl-C
    while stopping interrupts at once (still pausing).

    The signal handlers only note the request; the stop itself happens at a
    safe point (between registrations, or as the runner's own graceful stop),
    never as an exception raised wherever the main thread happens to be: that
    could land inside Prefect's event loop start-up and hang the process.
    """
    import asyncio

    from prefect.runner import Runner

    from shardwise.flows.serve_console import RunLines, runs_quiet_on_console
    from shardwise.flows.warm_runs import WarmRuns

    if not poll_s > 0:
        raise ConfigError(f"the poll interval must be a positive number of seconds; got {poll_s!r}")
    url = require_server()
    path = path or PREFECT_YAML
    deployments = runner_deployments(path)
    warm = {} if cold else _warm_candidates(path)
    stop = threading.Event()
    try:
        with _signals_request(stop):
            runner = Runner(pause_on_shutdown=True, query_seconds=poll_s)
            flows: dict[Any, Any] = {}
            served: dict[Any, str] = {}
            for deployment in deployments:
                if stop.is_set():
                    break
                if deployment.name in warm:
                    deployment_id = deployment.apply()
                    flows[deployment_id] = warm[deployment.name][0]
                else:
                    deployment_id = runner.add_deployment(deployment)
                served[deployment_id] = deployment.full_name
            if not stop.is_set():
                # Said once every deployment (and its trigger) is registered: an event from now on runs.
                print(
                    f"serving {', '.join(d.name for d in deployments)} on {url}; Ctrl-C to stop", flush=True
                )
                runs = WarmRuns(flows, poll_s, warm_up=lambda: _prewarm_all([p for _, p in warm.values()]))
                if flows:
                    names = ", ".join(sorted(warm))
                    print(f"{names} run{'s' if len(warm) == 1 else ''} warm in this process", flush=True)
                lines = RunLines(served, poll_s)
                with runs_quiet_on_console():
                    if flows:
                        runs.start()
                    lines.start()
                    try:
                        asyncio.run(_run_until(runner, stop))
                    finally:
                        runs.stop()
                        lines.stop()
    except KeyboardInterrupt:
        pass  # the second Ctrl-C: stopped all the same
    finally:
        paused = _pause([d.full_name for d in deployments])
        if paused:
            print(f"paused {', '.join(paused)} and their schedules; serve again to resume them", flush=True)


def _warm_candidates(path: Path) -> dict[str, tuple[Any, dict[str, Any]]]:
    """The deployments that run warm (those with an event trigger): name → (flow, parameters to prewarm
    with: the deployment's, under its first trigger's)."""
    out = {}
    for config in load_deployment_configs(path):
        triggers = config.get("triggers") or []
        if triggers:
            parameters = {**(config.get("parameters") or {}), **(triggers[0].get("parameters") or {})}
            out[config["name"]] = (load_entrypoint(config["entrypoint"]), parameters)
    return out


def _prewarm_all(parameters: Sequence[dict[str, Any]]) -> None:
    from shardwise.flows.warm_runs import prewarm

    for each in parameters:
        prewarm(each)


async def _run_until(runner: Runner, stop: threading.Event) -> None:
    """Run ``runner`` until it ends or ``stop`` is set, then stop it the way Prefect's own SIGTERM does.

    Prefect's runner installs its own SIGTERM handler once it starts (it
    stops gracefully); SIGINT, and a SIGTERM that came before, land in
    ``stop``, which is checked here.
    """
    import asyncio

    serving = asyncio.ensure_future(runner.start())
    while not serving.done():
        await asyncio.wait({serving}, timeout=0.25)
        if stop.is_set() and runner.started and not runner.stopping:
            await runner.astop()
    await serving


@contextmanager
def _signals_request(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop`` while this block runs, instead of raising or killing the process.

    A second SIGINT once ``stop`` is set raises ``KeyboardInterrupt``, for a
    user who does not want to wait for the graceful stop.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def request(signum: int, frame: FrameType | None) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.set()

    previous = {sig: signal.signal(sig, request) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _pause(names: Sequence[str]) -> list[str]:
    """Pause the deployments ``names`` (``flow/deployment``) that exist, and make their schedules inactive;
    returns the ones paused."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    paused = []
    with get_client(sync_client=True) as client:
        for name in names:
            try:
                deployment = client.read_deployment_by_name(name)
            except ObjectNotFound:
                continue  # stopped before it was registered
            client.pause_deployment(deployment.id)
            for schedule in deployment.schedules or ():
                if schedule.active:
                    client.update_deployment_schedule(deployment.id, schedule.id, active=False)
            paused.append(name)
    return paused


def deploy_deployments() -> int:
    """Create the process work pool if needed, then ``prefect deploy --all`` from the checkout."""
    require_server()
    pools = work_pools()
    prefect = [sys.executable, "-m", "prefect"]
    root = PREFECT_YAML.parent
    for pool in pools:
        listed = subprocess.run(
            [*prefect, "work-pool", "inspect", pool], capture_output=True, text=True, cwd=root
        )
        if listed.returncode != 0:
            subprocess.run([*prefect, "work-pool", "create", pool, "--type", "process"], check=True, cwd=root)
    done = subprocess.run([*prefect, "--no-prompt", "deploy", "--all"], cwd=root, env=os.environ.copy())
    if done.returncode == 0:
        print(f"deployed; start a worker with: {start_worker_command()}")
    return done.returncode
