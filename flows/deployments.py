"""The deployments in ``prefect.yaml``, as the one place that defines them.

``prefect deploy --all`` reads the file for a work pool and a worker;
``shardwise serve`` reads the same file and serves every deployment from one
process (no worker), for a single box.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import yaml

from shardwise.bounded_read import read_regular_file
from shardwise.errors import ConfigError

__all__ = [
    "MAX_DEPLOYMENTS_BYTES",
    "PREFECT_YAML",
    "load_deployment_configs",
    "load_entrypoint",
    "runner_deployments",
    "work_pools",
]

PREFECT_YAML = Path(__file__).resolve().parents[1] / "prefect.yaml"
MAX_DEPLOYMENTS_BYTES = 1 << 20
"""The most a deployments file may hold (1 MiB; the checkout's is a few kilobytes). It is read only if it
is a regular file (see :mod:`shardwise.bounded_read`): a FIFO there cannot hold ``serve`` for ever."""


def load_deployment_configs(path: Path = PREFECT_YAML) -> list[dict[str, Any]]:
    """The ``deployments`` list of ``prefect.yaml``, YAML anchors resolved."""
    if not path.exists():
        raise ConfigError(f"no prefect.yaml at {path}; run from a Shardwise checkout or pass its path")
    text = read_regular_file(path, what="the deployments file", max_bytes=MAX_DEPLOYMENTS_BYTES)
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not YAML ({' '.join(str(exc).split())}); fix the file") from None
    deployments = data.get("deployments") if isinstance(data, dict) else None
    if not isinstance(deployments, list):
        raise ConfigError(
            f"{path} has no deployments list; see docs/how-to/deployments.md for the expected layout"
        )
    return deployments


def work_pools(path: Path = PREFECT_YAML) -> list[str]:
    """The work pools the deployments of ``prefect.yaml`` name, sorted: what ``deploy`` creates and a
    worker polls."""
    return sorted({config["work_pool"]["name"] for config in load_deployment_configs(path)})


def load_entrypoint(entrypoint: str) -> Any:
    """The flow object behind ``flows/file.py:name``, imported as ``shardwise.flows.file``.

    ``prefect deploy`` takes entrypoints as files relative to the project's
    root, so ``prefect.yaml`` names ``flows/score.py``; the folder installs as
    ``shardwise.flows``, and serving imports the flow from there, so a served
    run and a worker's run execute the same installed module.
    """
    file_part, _, name = entrypoint.partition(":")
    module = importlib.import_module("shardwise." + file_part.removesuffix(".py").replace("/", "."))
    try:
        return getattr(module, name)
    except AttributeError as exc:
        raise ConfigError(f"entrypoint {entrypoint!r}: module has no {name!r}") from exc


def runner_deployments(path: Path = PREFECT_YAML) -> list[Any]:
    """Every deployment of ``prefect.yaml`` as an object :func:`prefect.serve` accepts."""
    from prefect.deployments.runner import EntrypointType
    from prefect.events import DeploymentEventTrigger
    from prefect.schedules import Cron

    out = []
    for config in load_deployment_configs(path):
        flow = load_entrypoint(config["entrypoint"])
        schedules = [
            Cron(s["cron"], timezone=s.get("timezone"), active=s.get("active", True))
            for s in config.get("schedules") or []
        ]
        triggers = [
            DeploymentEventTrigger(**{k: v for k, v in t.items() if k != "type"})
            for t in config.get("triggers") or []
        ]
        out.append(
            flow.to_deployment(
                name=config["name"],
                description=config.get("description"),
                parameters=config.get("parameters") or {},
                schedules=schedules or None,
                triggers=triggers or None,
                concurrency_limit=config.get("concurrency_limit"),
                # Served runs import the flow by module (the package is installed), whatever the cwd.
                entrypoint_type=EntrypointType.MODULE_PATH,
            )
        )
    return out
