"""``shardwise serve`` and ``shardwise deploy``: the two ways to put the deployments on a Prefect server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shardwise.errors import ConfigError
from shardwise.flows.deployments import PREFECT_YAML, load_deployment_configs, runner_deployments

__all__ = ["deploy_deployments", "require_server", "serve_deployments"]


def require_server() -> str:
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise ConfigError(
            "serve, deploy and watch need a running Prefect server (an ephemeral one would vanish with "
            "this process): run `prefect server start`, then export PREFECT_API_URL=http://127.0.0.1:4200/api"
        )
    return str(url)


def serve_deployments(path: Path | None = None) -> None:
    """Register every deployment of ``prefect.yaml`` and run their flow runs here until interrupted.

    Schedules and event triggers work without a worker. Stopping the process
    pauses the served schedules (Prefect's behaviour); serve again to resume.
    """
    from prefect import serve

    url = require_server()
    deployments = runner_deployments(path or PREFECT_YAML)
    print(f"serving {', '.join(d.name for d in deployments)} on {url}; Ctrl-C to stop", flush=True)
    serve(*deployments)


def deploy_deployments() -> int:
    """Create the process work pool if needed, then ``prefect deploy --all`` from the checkout."""
    require_server()
    pools = {c["work_pool"]["name"] for c in load_deployment_configs()}
    prefect = [sys.executable, "-m", "prefect"]
    root = PREFECT_YAML.parent
    for pool in sorted(pools):
        listed = subprocess.run(
            [*prefect, "work-pool", "inspect", pool], capture_output=True, text=True, cwd=root
        )
        if listed.returncode != 0:
            subprocess.run([*prefect, "work-pool", "create", pool, "--type", "process"], check=True, cwd=root)
    done = subprocess.run([*prefect, "--no-prompt", "deploy", "--all"], cwd=root, env=os.environ.copy())
    if done.returncode == 0:
        print(f"deployed; start a worker with: prefect worker start --pool {' / '.join(sorted(pools))}")
    return done.returncode
