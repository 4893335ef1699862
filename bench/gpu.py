"""Every GPU check and benchmark in one command, for a session lent a GPU machine for a few minutes.

    python bench/gpu.py --budget-s 300 --models .gpu-pack --out-dir "$OUT"

In order, each step with its own time limit (a share of ``--budget-s``):
the environment (GPU, memory, torch and CUDA, bf16, CPUs); ``pytest -m gpu``;
the encoder bench (``bench/engine.py``) on CUDA in fp32, bf16 and fp16; the
generation bench (``bench/generate.py``, Hugging Face engine) in fp32 and
bf16; the vLLM engine against bare vLLM and the Hugging Face engine
(``bench/generate.py --engine vllm``) in bf16 and in fp16, when vllm is
installed and imports (else each says why it is skipped); and the
prefetcher's host-to-device overlap timed with CUDA events
(``bench/h2d_overlap.py``). Each figure is one JSON line on stdout
(``{"step", "figure", "value", "unit", ...context}``), a step that cannot run
is one line ``{"step", "skipped": why}``, a step that breaks is one line
``{"step", "error"}`` and the run goes on; a summary line comes last. Notes
for people go to stderr. Exit code 0 when no step failed (on a machine
without CUDA every step is skipped, and says why), 1 when one did, 2 for bad
options (before anything runs). ``--device cpu`` rehearses every step on
the CPU at the smallest sizes, so a broken step costs no GPU minutes. See
docs/benchmarks.md, "GPU".
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shardwise.environment import set_defaults

set_defaults(prefect=False)

from bench.gpu_budget import Budget
from bench.gpu_env import Environment, no_cuda_reason, probe
from bench.gpu_lines import Lines, Outcome, error_line, skipped_line
from bench.gpu_models import CORPUS_FILE, MINILM_DIR, MINILM_HALF
from bench.gpu_run import run_step
from bench.gpu_steps import FULL, QUICK, REHEARSAL, STEPS, Context, Planned, Step, default_corpus, step_names

__all__ = ["main"]

INSTALL = "{python} -m pip install --no-deps --no-build-isolation --no-index -e {root}"


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--budget-s", type=float, default=300.0, help="seconds for every step together")
    parser.add_argument("--quick", action="store_true", help="smaller sizes: a check that it all runs")
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: rehearse every step on the CPU at the smallest sizes (no figure worth quoting)",
    )
    parser.add_argument("--models", type=Path, help="a folder made by: python bench/gpu_models.py pack DIR")
    parser.add_argument("--corpus", type=Path, help="Parquet file with a text column (default: the pack's)")
    parser.add_argument("--encoder", help="--model for the encoder steps (default: minilm, else the pack's)")
    parser.add_argument("--generator", help="--model for the generation steps (default: SmolLM2's shape)")
    parser.add_argument("--only", help=f"comma-separated steps to run, of: {', '.join(step_names())}")
    parser.add_argument("--out-dir", type=Path, help="also write gpu.jsonl (the lines) and gpu.log here")
    args = parser.parse_args(argv)
    args.only = step_names() if args.only is None else [n.strip() for n in args.only.split(",") if n.strip()]
    problem = _problem(args)
    if problem is not None:
        parser.exit(2, f"bench/gpu.py: {problem}\n")
    # The steps run in the checkout's root: paths given from elsewhere must still name the same files.
    for name in ("models", "corpus", "out_dir"):
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).resolve())
    for name in ("encoder", "generator"):
        given = getattr(args, name)
        if given is not None and Path(given).exists():
            setattr(args, name, str(Path(given).resolve()))
    return args


def _problem(args: argparse.Namespace) -> str | None:
    """The first bad option, as one line naming the value and the fix; None when all are usable."""
    if not args.budget_s >= 10:
        return f"--budget-s {args.budget_s:g}: give at least 10 seconds (a lent machine's call: about 300)"
    names = step_names()
    unknown = [n for n in args.only if n not in names]
    if unknown or not args.only:
        return f"--only {','.join(unknown) or '(none)'}: not a step; the steps are {', '.join(names)}"
    pack_files = (f"{MINILM_DIR}/{MINILM_HALF}", CORPUS_FILE)
    if args.models is not None and not any((args.models / f).is_file() for f in pack_files):
        return (
            f"--models {args.models}: not a pack (no {' or '.join(pack_files)} in it); make one here with: "
            f"python bench/gpu_models.py pack {args.models} --corpus ../shared/corpus/python_docs.parquet"
        )
    if args.corpus is not None and not args.corpus.is_file():
        return f"--corpus {args.corpus}: no such file; give a Parquet file with a text column"
    if args.out_dir is not None and args.out_dir.exists() and not args.out_dir.is_dir():
        return f"--out-dir {args.out_dir}: is a file; give a folder (it is made if missing)"
    return _installed() or _model_problem(args)


def _installed() -> str | None:
    """The steps' subprocesses import ``shardwise.models`` (this checkout's ``models/``), which only an
    install maps; a plain copy of the tree on ``sys.path`` has ``shardwise`` without it."""
    found = importlib.util.find_spec("shardwise.models")
    origin = None if found is None or found.origin is None else Path(found.origin).resolve()
    if origin is not None and origin.is_relative_to(ROOT):
        return None
    where = "is missing" if origin is None else f"comes from {origin.parent}"
    return (
        f"shardwise is not installed from this checkout for {sys.executable} (shardwise.models {where}); "
        f"install it first: {INSTALL.format(python=sys.executable, root=ROOT)}"
    )


def _model_problem(args: argparse.Namespace) -> str | None:
    if args.encoder is None and args.generator is None:
        return None
    from shardwise.errors import ShardwiseError
    from shardwise.models import get_spec

    for option, name in (("--encoder", args.encoder), ("--generator", args.generator)):
        if name is None:
            continue
        try:
            get_spec(name).describe()
        except ShardwiseError as exc:
            return f"{option} {name}: {exc}"
    return None


def _say(text: str) -> None:
    print(f"bench/gpu.py: {text}", file=sys.stderr, flush=True)


def _plans(steps: list[Step], ctx: Context) -> list[tuple[Step, Planned | str | Exception]]:
    """Each step's plan, or why it cannot run here (such a step shares no time), before any runs."""
    plans: list[tuple[Step, Planned | str | Exception]] = []
    for step in steps:
        try:
            plans.append((step, step.plan(ctx)))
        except Exception as exc:  # a step's own problem: reported at its turn; the others run
            plans.append((step, exc))
    return plans


def _report(lines: Lines, name: str, outcome: Outcome, emitted: list[dict[str, object]], note: str) -> None:
    for line in emitted:
        lines.emit(line)
    lines.outcome(name, outcome)
    _say(f"{name}: {note}")


def _measure(args: argparse.Namespace, env: Environment, lines: Lines, budget: Budget, work: Path) -> None:
    ctx = Context(
        python=sys.executable,
        root=ROOT,
        work=work,
        sizes=REHEARSAL if args.device == "cpu" else QUICK if args.quick else FULL,
        device=args.device,
        corpus=args.corpus or default_corpus(args.models),
        pack=args.models,
        encoder=args.encoder,
        generator=args.generator,
        context={"device": env.gpu or args.device},
    )
    log = (args.out_dir or work) / "gpu.log"
    log.write_text("")  # this run's commands only
    plans = _plans([s for s in STEPS if s.name in args.only], ctx)
    for i, (step, plan) in enumerate(plans):
        if isinstance(plan, Exception):
            why = f"planning it failed: {type(plan).__name__}: {plan}"
            _report(lines, step.name, "failed", [error_line(step.name, why)], f"FAILED: {why}")
            continue
        if isinstance(plan, str):
            _report(lines, step.name, "skipped", [skipped_line(step.name, plan)], f"skipped: {plan}")
            continue
        seconds = budget.allot([s.weight for s, p in plans[i:] if isinstance(p, Planned)])
        if seconds < step.min_s:
            why = (
                f"its share of --budget-s is {seconds:.0f}s, under the {step.min_s:.0f}s it needs; "
                "give a larger --budget-s, or --only it"
            )
            _report(lines, step.name, "skipped", [skipped_line(step.name, why)], f"skipped: {why}")
            continue
        _say(f"{step.name}: running, at most {seconds:.0f}s")
        scratch = work / step.name
        scratch.mkdir()
        done = run_step(step.name, plan, seconds, ROOT, scratch, log, ctx.context)
        figures = sum("figure" in line for line in done.lines)
        _report(
            lines,
            step.name,
            done.outcome,
            done.lines,
            f"{done.outcome}, {figures} figures in {done.seconds:.0f}s",
        )


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    budget = Budget(args.budget_s)
    if args.out_dir is not None:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    lines = Lines(copy=None if args.out_dir is None else args.out_dir / "gpu.jsonl")
    env = probe()
    lines.emit(env.line())
    reason = no_cuda_reason(env) if args.device == "cuda" else None
    if reason is not None:
        for name in args.only:
            lines.emit(skipped_line(name, reason))
            lines.outcome(name, "skipped")
        _say(f"{reason}. Every step skipped; nothing was measured.")
    else:
        with tempfile.TemporaryDirectory(prefix="shardwise-gpu-") as work:
            _measure(args, env, lines, budget, Path(work))
    summary = lines.summary(
        elapsed_s=round(budget.elapsed_s, 1), budget_s=args.budget_s, device=env.gpu or args.device
    )
    lines.close()
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
