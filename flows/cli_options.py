"""The options ``run``, ``redrive`` and ``plan`` share, and how they become the flow's :class:`ScoreParams`.

Parsing checks each value as it is read (a device, an agreement), so a
mistake is one usage line before anything imports torch or Prefect. A URL
that holds a password is swapped for an ``env:`` name here, so Prefect never
stores it in run parameters.
"""

from __future__ import annotations

import argparse
import os

__all__ = ["add_runner_arguments", "add_source_arguments", "fanout_options", "score_params"]


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source", required=True, help="database URL, Parquet path/glob, or s3://bucket/prefix"
    )
    parser.add_argument("--table", help="source table, for a database source")
    parser.add_argument("--key", default="id", help="key column (integer or text)")
    parser.add_argument("--text-column", default="text")
    parser.add_argument("--where", help="SQL filter on the source table")
    parser.add_argument("--model", default="minilm", help="minilm, tiny, or a local encoder directory")
    sizing = parser.add_mutually_exclusive_group()
    sizing.add_argument("--shards", type=int, help="exactly this many shards")
    sizing.add_argument("--rows-per-shard", type=int, help="about this many rows per shard (default 10000)")
    parser.add_argument("--only-new", action="store_true", help="only rows without a current result")
    parser.add_argument(
        "--device",
        default="auto",
        type=_device,
        help="auto, cpu, cuda (one GPU per worker) or cuda:N (default: auto)",
    )
    parser.add_argument(
        "--precision",
        default="auto",
        choices=("auto", "fp32", "bf16", "fp16"),
        help="numeric precision (default: auto, the fastest the device computes natively; README: Precision)",
    )
    parser.add_argument(
        "--min-agreement",
        type=_agreement,
        default=None,
        help="accuracy guard: minimum cosine to fp32 a reduced precision must reach (default 0.999)",
    )


def _agreement(value: str) -> float:
    try:
        found = float(value)
    except ValueError:
        found = -1.0
    if not 0 < found <= 1:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an agreement; give a number in (0, 1], such as 0.999 (the default)"
        )
    return found


def add_runner_arguments(parser: argparse.ArgumentParser) -> None:
    from tasks.runners import RUNNERS

    group = parser.add_argument_group("fan-out", "what runs the shards (README: Scaling out)")
    group.add_argument("--runner", default="thread", choices=RUNNERS, help="default: thread")
    group.add_argument(
        "--workers",
        type=int,
        help="workers scoring at once (default: one per visible GPU, else 1); with --address it sizes "
        "the default shard count",
    )
    group.add_argument(
        "--address", help="an existing cluster: dask tcp://host:8786, or ray host:6379 / ray://host:10001"
    )
    group.add_argument("--threads", type=int, help="torch threads per worker (default: cores / workers)")
    group.add_argument(
        "--deployment",
        default="score-shard/per-shard",
        help="--runner deployment: the per-shard flow's deployment (default: score-shard/per-shard)",
    )


def _device(value: str) -> str:
    import re

    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a device; use auto, cpu, cuda or cuda:N")
    return value


def score_params(args: argparse.Namespace, **extra: object):  # -> ScoreParams
    """The flow's parameters from parsed options; ``extra`` holds the subcommand's own."""
    from flows.params import ScoreParams

    runner = extra.get("runner")
    remote = runner == "deployment" or (extra.get("address") is not None and runner in ("dask", "ray"))
    return ScoreParams(
        source=_by_name(args.source, "SHARDWISE_CLI_SOURCE_URL", remote),
        table=args.table,
        key=args.key,
        text_column=args.text_column,
        where=args.where,
        model=args.model,
        results=_by_name(args.results, "SHARDWISE_CLI_RESULTS_URL", remote),
        results_table=args.results_table,
        shards=args.shards,
        rows_per_shard=args.rows_per_shard,
        only_new=args.only_new,
        device=args.device,
        precision=args.precision,
        **({} if args.min_agreement is None else {"min_agreement": args.min_agreement}),
        **extra,
    )


def _by_name(url: str | None, variable: str, remote: bool = False) -> str | None:
    """A URL holding a secret travels as ``env:NAME``, so Prefect never stores it in run parameters.

    The flow and local workers run on this host and read the variable set
    here; workers of a cluster elsewhere could not, so then it is refused.
    """
    from shardwise.errors import ConfigError
    from shardwise.redact import redact

    if url is None or redact(url) == url:
        return url
    if remote:
        raise ConfigError(
            f"{redact(url)} holds a password, which must not travel to workers on other hosts; set it on "
            "the workers (and here) as an environment variable, e.g. export DB_URL=..., and pass env:DB_URL"
        )
    os.environ[variable] = url
    return f"env:{variable}"


def fanout_options(args: argparse.Namespace) -> dict[str, object]:
    """The fan-out options (runner, workers, address, threads, deployment) as ScoreParams fields."""
    return {
        "runner": args.runner,
        "workers": args.workers,
        "address": args.address,
        "threads": args.threads,
        "deployment": args.deployment,
    }
