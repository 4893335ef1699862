"""The command line's service commands: ``watch``, ``serve`` and ``deploy``, which run beside a Prefect
server rather than start flows of their own (see :mod:`flows.cli` for the scoring commands)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from shardwise.flows import cli_commands

API_URL = "{prefect_api_url}"
"""Stands in the serve and deploy examples for where ``prefect server start`` serves: the parser fills it
in from Prefect's settings only when that help is printed (:class:`flows.cli._Parser`), so that building
the parser, for any command, imports no Prefect."""

__all__ = ["add_service_commands"]

Command = Callable[..., argparse.ArgumentParser]
"""Adds one subcommand, ``(name, summary, about, example, **kwargs)``, as the main parser makes it."""


def add_service_commands(command: Command) -> None:
    """Add ``watch``, ``serve`` and ``deploy`` through ``command``."""
    from shardwise.flows.serving import DEFAULT_POLL_S
    from shardwise.watch import DEFAULT_DEBOUNCE_S

    watch = command(
        "watch",
        "emit shardwise.data.landed when new rows or objects land",
        "Watch a source and emit the Prefect event shardwise.data.landed when new rows or objects land;\n"
        "the on-new-data deployment in prefect.yaml scores only those. PostgreSQL tables are watched\n"
        "with LISTEN/NOTIFY (after --install-trigger) or by polling, Parquet folders and S3 prefixes by\n"
        "listing. Needs a Prefect server (PREFECT_API_URL).",
        "shardwise watch --source env:SHARDWISE_SOURCE_URL --table docs --name docs --mode notify",
    )
    watch.add_argument(
        "--source",
        required=True,
        metavar="URL|PATH|env:NAME",
        help="database URL (or env:NAME / secret:NAME), Parquet path, or s3:// prefix",
    )
    watch.add_argument("--table", help="table to watch, for a database source")
    watch.add_argument("--key", default="id", help="key column of the table (default: id)")
    watch.add_argument(
        "--name", required=True, help="source name: the event resource is shardwise.source.NAME"
    )
    watch.add_argument("--updated-at", help="timestamp column for the polling watermark")
    watch.add_argument(
        "--mode",
        default="auto",
        choices=["auto", "notify", "poll"],
        help="notify: PostgreSQL LISTEN/NOTIFY; poll: query every --interval; auto: notify when the "
        "trigger is installed, else poll (default: auto)",
    )
    watch.add_argument("--install-trigger", action="store_true", help="install the PostgreSQL NOTIFY trigger")
    watch.add_argument(
        "--interval",
        dest="interval_s",
        type=float,
        default=30.0,
        help="seconds between polls or listings (default: 30)",
    )
    watch.add_argument(
        "--debounce",
        dest="debounce_s",
        type=float,
        default=DEFAULT_DEBOUNCE_S,
        help=f"seconds to gather notifications into one event (default: {DEFAULT_DEBOUNCE_S:g})",
    )
    watch.add_argument("--results", help="results database (Parquet sources: skip objects already scored)")
    watch.set_defaults(handler=cli_commands.watch)

    serve = command(
        "serve",
        "serve the prefect.yaml deployments from this process (no worker)",
        "Register the deployments of prefect.yaml (nightly, manual, on-new-data) and run their flow runs\n"
        "until stopped; stopping pauses them and their schedules, and serving again resumes them. A\n"
        "deployment with an event trigger (on-new-data) runs warm, in this process, where its model stays\n"
        "loaded; the others get a fresh process per flow run. Needs a Prefect server (PREFECT_API_URL).",
        f"PREFECT_API_URL={API_URL} shardwise serve",
    )
    serve.add_argument(
        "--prefect-yaml", type=Path, default=None, help="deployments file (default: the checkout's)"
    )
    serve.add_argument(
        "--cold",
        action="store_true",
        help="run every deployment in a fresh process per flow run, triggered ones too (slower to start)",
    )
    serve.add_argument(
        "--poll",
        dest="poll_s",
        type=float,
        default=DEFAULT_POLL_S,
        help=f"seconds between asking the server for runs to start (default: {DEFAULT_POLL_S:g})",
    )
    serve.set_defaults(handler=cli_commands.serve)

    deploy = command(
        "deploy",
        "create the process work pool and deploy prefect.yaml to it",
        "Create the process work pool and deploy every deployment of prefect.yaml to it; a worker\n"
        f"({_worker_command()}) then runs them.",
        f"PREFECT_API_URL={API_URL} shardwise deploy",
    )
    deploy.set_defaults(handler=cli_commands.deploy)


def _worker_command() -> str:
    """How to start a worker for prefect.yaml's work pool, as ``deploy`` says it once done."""
    from shardwise.errors import ConfigError
    from shardwise.flows.serving import start_worker_command

    try:
        return start_worker_command()
    except ConfigError:  # no checkout here: deploy itself will say so
        return "prefect worker start --pool POOL, the work_pool of prefect.yaml"
