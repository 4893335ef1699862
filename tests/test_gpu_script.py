"""bench/gpu.py, the one command a session lent a GPU runs: on this CPU machine it must skip every step,
say why, print valid JSON lines and exit 0, quickly; bad options stop it before anything runs; and its
parts that need no GPU (the lines, the time budget, the runner, reading each bench's output) work here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/ is not installed; it imports bench.*

from bench.gpu_budget import MARGIN_S, Budget, share
from bench.gpu_env import Environment, no_cuda_reason, probe
from bench.gpu_lines import ERROR_CHARS, Lines, error_line, figure_line
from bench.gpu_read import (
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
from bench.gpu_run import run_command, run_step
from bench.gpu_steps import FULL, QUICK, REHEARSAL, STEPS, Planned, Sizes, gpu_test_files, step_names
from bench.h2d_overlap import iterations_for, overlap_fraction

CHECKOUT = Path(__file__).resolve().parents[1]
SCRIPT = CHECKOUT / "bench" / "gpu.py"
no_cuda_here = pytest.mark.skipif(
    torch.cuda.is_available(), reason="this machine has CUDA: bench/gpu.py would measure, not skip"
)


def _gpu_py(
    *args: str, timeout: float = 120, python: tuple[str, ...] = (sys.executable,)
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*python, str(SCRIPT), *args], cwd=CHECKOUT, capture_output=True, text=True, timeout=timeout
    )


@no_cuda_here
def test_without_cuda_every_step_is_one_skipped_line_saying_why_and_the_exit_code_is_0(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    done = _gpu_py("--budget-s", "300", "--out-dir", str(tmp_path / "out"))
    seconds = time.monotonic() - started

    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]  # every line is JSON
    env, *steps, summary = lines
    assert env["step"] == "env" and env["cuda_available"] is False and env["torch"] == torch.__version__
    assert env["gpu"] is None and env["cpu_count"] == os.cpu_count()
    assert [line["step"] for line in steps] == step_names(), "one line per step, in order"
    for line in steps:
        assert set(line) == {"step", "skipped"}, line
        reason = line["skipped"]
        assert reason.startswith("no CUDA device: ") and f"torch {torch.__version__}" in reason
        assert "torch.cuda.is_available() is False" in reason
        if torch.version.cuda is None:
            assert "CPU-only build" in reason and "CUDA build of torch" in reason, "what to do"
    assert summary == {
        "step": "summary",
        "ok": [],
        "skipped": step_names(),
        "failed": [],
        "figures": 0,
        "elapsed_s": summary["elapsed_s"],
        "budget_s": 300.0,
        "device": "cuda",
    }
    assert "no CUDA device" in done.stderr and "nothing was measured" in done.stderr
    assert (tmp_path / "out" / "gpu.jsonl").read_text().splitlines() == done.stdout.splitlines()
    assert seconds < 60 and summary["elapsed_s"] < 10, "it skips quickly, spending none of its budget"


@pytest.mark.slow
def test_the_cpu_rehearsal_runs_the_steps_for_real_and_prints_their_figures(tmp_path: Path) -> None:
    """``--device cpu``: the same commands and readers as on a GPU, so a broken step costs no GPU time."""
    done = _gpu_py(
        *("--device", "cpu", "--encoder", "tiny", "--only", "pytest-gpu,encode-fp32,encode-fp16,h2d-overlap"),
        *("--budget-s", "300", "--out-dir", str(tmp_path)),
        timeout=400,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    summary = lines[-1]
    assert summary["ok"] == ["pytest-gpu", "encode-fp32"] and summary["failed"] == []
    assert summary["skipped"] == ["encode-fp16", "h2d-overlap"], "refused on a CPU, and CUDA-only"
    figures = {(line["step"], line["figure"]): line for line in lines if "figure" in line}
    tests = figures["pytest-gpu", "passed"]
    assert tests["total"] == tests["skipped"] > 0, "every GPU test skips on a CPU"
    rows = figures["encode-fp32", "rows_per_s"]
    assert rows["value"] > 0 and rows["unit"] == "rows/s" and rows["rows"] == REHEARSAL.encode_rows
    assert rows["model"] == "tiny" and rows["precision"] == "fp32" and rows["device"] == "cpu"
    assert "bench/engine.py --device cpu --precision fp32" in (tmp_path / "gpu.log").read_text()


def test_a_step_whose_share_of_the_budget_is_under_its_minimum_is_not_started(tmp_path: Path) -> None:
    done = _gpu_py(
        *("--device", "cpu", "--encoder", "tiny", "--only", "encode-fp32,generate-hf", "--budget-s", "40"),
        *("--out-dir", str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr
    _, encode, generate, summary = (json.loads(line) for line in done.stdout.splitlines())
    share_pattern = r"its share of --budget-s is (\d+)s, under the (\d+)s it needs; give a larger --budget-s"
    for line, weights, least in ((encode, 1.5 / 4, 30), (generate, 2.5 / 2.5, 45)):
        found = re.match(share_pattern, line["skipped"])
        assert found is not None, line
        assert int(found[1]) <= round((40 - MARGIN_S) * weights) and int(found[2]) == least, line
    assert summary["skipped"] == ["encode-fp32", "generate-hf"] and summary["figures"] == 0
    assert (tmp_path / "gpu.log").read_text() == "", "no command ran"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--budget-s", "0"], ["--budget-s 0:", "at least 10 seconds"]),
        (["--only", "encode-fp64"], ["--only encode-fp64: not a step", "encode-fp32, encode-bf16"]),
        (["--models", "no/such/pack"], ["--models no/such/pack: not a pack", "bench/gpu_models.py pack"]),
        (["--corpus", "no/such.parquet"], ["--corpus no/such.parquet: no such file", "Parquet file"]),
        (["--encoder", "no-such-model"], ["--encoder no-such-model:", "known models: minilm"]),
    ],
)
def test_a_bad_option_is_one_line_naming_it_and_the_fix_exit_2_before_anything_runs(
    args: list[str], says: list[str]
) -> None:
    done = _gpu_py(*args)
    assert done.returncode == 2
    assert done.stdout == "", "nothing ran: not even the environment line"
    (line,) = done.stderr.splitlines()
    assert line.startswith("bench/gpu.py: ")
    for words in says:
        assert words in line, line


def test_a_python_without_this_checkout_installed_is_told_the_install_command() -> None:
    """``-S``: no site-packages, so no install maps shardwise.models to models/, as on a bare machine."""
    done = _gpu_py("--quick", python=(sys.executable, "-S"))
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert "shardwise is not installed from this checkout" in line
    assert f"{sys.executable} -m pip install --no-deps --no-build-isolation --no-index -e {CHECKOUT}" in line


def test_the_reason_without_cuda_says_what_the_torch_build_is_and_what_to_do() -> None:
    here = probe()
    assert here.torch == torch.__version__ and here.cuda_available == torch.cuda.is_available()
    cuda_build = Environment("3.12.3", "2.11.0+cu130", "13.0", False, None, None, None, None, 16, 16, {})
    reason = no_cuda_reason(cuda_build)
    assert reason is not None and "torch 2.11.0+cu130 (built for CUDA 13.0)" in reason
    assert "nvidia-smi" in reason and "CUDA_VISIBLE_DEVICES" in reason
    seen = Environment("3.12.3", "2.11.0+cu130", "13.0", True, "NVIDIA H100", 79.2, "9.0", True, 16, 16, {})
    assert no_cuda_reason(seen) is None
    assert seen.line()["step"] == "env" and seen.line()["gpu"] == "NVIDIA H100"


def test_a_figure_line_is_json_and_a_figure_that_is_not_finite_is_null_with_the_reason(
    tmp_path: Path,
) -> None:
    out = tmp_path / "stdout.txt"
    with out.open("w") as stream:
        lines = Lines(stream, copy=tmp_path / "copy.jsonl")
        lines.emit(figure_line("encode-bf16", "rows_per_s", 1234.5, "rows/s", precision="bf16"))
        lines.emit(figure_line("encode-bf16", "speedup_vs_st", float("inf"), "x"))
        lines.outcome("encode-bf16", "ok")
        lines.outcome("generate-vllm", "skipped")
        lines.summary(elapsed_s=1.0)
        lines.close()
    first, second, summary = (json.loads(line) for line in out.read_text().splitlines())
    assert first == {
        "step": "encode-bf16",
        "figure": "rows_per_s",
        "value": 1234.5,
        "unit": "rows/s",
        "precision": "bf16",
    }
    assert second["value"] is None and second["not_finite"] == "inf"
    assert summary == {
        "step": "summary",
        "ok": ["encode-bf16"],
        "skipped": ["generate-vllm"],
        "failed": [],
        "figures": 2,
        "elapsed_s": 1.0,
    }
    assert (tmp_path / "copy.jsonl").read_text() == out.read_text()


def test_an_error_line_keeps_one_line_and_the_end_of_a_long_traceback() -> None:
    traceback = "Traceback (most recent call last):\n" + "  frame\n" * 1000 + "ValueError: the cause\n"
    line = error_line("encode-fp16", traceback)
    assert "\n" not in line["error"] and line["error"].endswith("ValueError: the cause")
    assert len(line["error"]) <= ERROR_CHARS + 3 and line["error"].startswith("...")


def test_each_step_gets_its_weight_share_of_the_time_left_and_what_one_leaves_goes_to_the_next() -> None:
    assert share(105, [1, 1, 2]) == pytest.approx((105 - MARGIN_S) / 4)
    assert share(3, [1]) == 0, "the margin is kept back"
    with pytest.raises(ValueError, match="weights must be positive"):
        share(100, [1, 0])
    now = [0.0]
    budget = Budget(300, clock=lambda: now[0])
    first = budget.allot([1, 1, 1])
    now[0] = 10.0  # the first step took 10 s of its ~98
    second = budget.allot([1, 1])
    assert second == pytest.approx((290 - MARGIN_S) / 2) and second > first
    now[0] = 400.0
    assert budget.left_s == 0 and budget.allot([1]) == 0
    with pytest.raises(ValueError, match="positive number of seconds"):
        Budget(0)


def test_a_command_past_its_limit_is_stopped_with_the_processes_it_started(tmp_path: Path) -> None:
    child = (
        "import subprocess, time; p = subprocess.Popen(['sleep', '60']); print(p.pid, flush=True); "
        "time.sleep(60)"
    )
    started = time.monotonic()
    done = run_command([sys.executable, "-c", child], 2, tmp_path, tmp_path, tmp_path / "log")
    assert done.timed_out and time.monotonic() - started < 20
    grandchild = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _running(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(grandchild), "the command's own child was stopped with it"
    assert "stopped at its time limit" in (tmp_path / "log").read_text()


def _running(pid: int) -> bool:
    """Alive: not gone, and not a zombie (dead, waiting for its new parent to reap it)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_step_reads_its_last_command_and_fails_on_an_exit_code_a_timeout_or_unreadable_output(
    tmp_path: Path,
) -> None:
    def step(*codes: str, seconds: float = 60) -> tuple[str, list[dict]]:
        commands = tuple((sys.executable, "-c", code) for code in codes)
        plan = Planned(commands, lambda out: Readout(bench_figures("s", last_json(out), {"x": "rows/s"}, ())))
        scratch = tmp_path / str(len(list(tmp_path.iterdir())))
        scratch.mkdir()
        done = run_step("s", plan, seconds, tmp_path, scratch, tmp_path / "log", {"device": "d"})
        return done.outcome, done.lines

    assert step("print(1)", "print('{\"x\": 2.5}')") == (
        "ok",
        [{"step": "s", "figure": "x", "value": 2.5, "unit": "rows/s"}],
    )
    outcome, (line,) = step("import sys; sys.exit('first command broke')", "print('{\"x\": 1}')")
    assert (
        outcome == "failed" and line["error"] == "exit code 1: first command broke" and line["device"] == "d"
    )
    outcome, (line,) = step("print('no json')")
    assert outcome == "failed" and "printed no JSON line" in line["error"]
    outcome, (line,) = step("import time; time.sleep(30)", seconds=1)
    assert outcome == "failed" and line["error"].startswith("stopped after 1s, its share of --budget-s")


def test_every_figure_the_benches_report_has_a_unit_or_is_context() -> None:
    from bench import engine, generate, h2d_overlap

    for keys, units, context in (
        (engine.KEYS, ENCODE_UNITS, ENCODE_CONTEXT),
        (generate.KEYS, GENERATE_UNITS, GENERATE_CONTEXT),
        (h2d_overlap.KEYS, H2D_UNITS, H2D_CONTEXT),
    ):
        assert set(keys) == set(units) | set(context), set(keys) ^ (set(units) | set(context))


def test_bench_figures_skip_what_a_bench_left_null_and_carry_the_context() -> None:
    result = {
        "rows": 100,
        "precision": "bf16",
        "rows_per_s": 10.0,
        "st_rows_per_s": None,
        "cpu_int8_kernel": None,
        "model": "hf:/tmp/x",
        "guard_accepts": True,
    }
    lines = bench_figures(
        "e",
        result,
        {"rows_per_s": "rows/s"},
        ("rows", "precision", "cpu_int8_kernel", "model"),
        model="minilm",
        device="H100",
    )
    assert lines == [
        {
            "step": "e",
            "figure": "rows_per_s",
            "value": 10.0,
            "unit": "rows/s",
            "rows": 100,
            "precision": "bf16",
            "model": "minilm",
            "device": "H100",
        },
        {
            "step": "e",
            "figure": "guard_accepts",
            "value": True,
            "unit": None,
            "rows": 100,
            "precision": "bf16",
            "model": "minilm",
            "device": "H100",
        },
    ]


def test_pytest_gpu_is_summed_from_a_real_junit_report(tmp_path: Path) -> None:
    (tmp_path / "test_three.py").write_text(
        textwrap.dedent(
            """
            import pytest

            def test_passes():
                pass

            def test_fails():
                assert 1 == 2, "one is not two"

            def test_skips():
                pytest.skip("no device")
            """
        )
    )
    report = tmp_path / "report.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            "test_three.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
    )
    readout = pytest_summary("pytest-gpu", report, device="H100")
    (line,) = readout.figures
    assert (line["figure"], line["value"], line["unit"]) == ("passed", 1, "tests")
    assert (line["failed"], line["errors"], line["skipped"], line["total"]) == (1, 0, 1, 3)
    assert line["failing"] == ["test_three::test_fails: AssertionError: one is not two"]
    assert readout.error == "1 of 3 GPU tests failed: test_three::test_fails: AssertionError: one is not two"


def test_the_gpu_tests_are_found_by_their_marker_in_the_code(tmp_path: Path) -> None:
    found = gpu_test_files(CHECKOUT / "tests")
    assert CHECKOUT / "tests" / "engine" / "test_gpu.py" in found
    assert Path(__file__) not in found, "naming the marker in a string is not marking a test"
    (tmp_path / "test_marked.py").write_text("import pytest\n\n@pytest.mark.gpu\ndef test_x():\n    pass\n")
    (tmp_path / "test_plain.py").write_text("def test_y():\n    assert 'pytest.mark.gpu'\n")
    assert gpu_test_files(tmp_path) == [tmp_path / "test_marked.py"]


def test_the_sizes_shrink_from_full_to_quick_to_the_cpu_rehearsal() -> None:
    for field in ("encode_rows", "generate_rows", "new_tokens", "h2d_batches", "h2d_rows", "repeat"):
        assert getattr(FULL, field) >= getattr(QUICK, field) >= getattr(REHEARSAL, field) >= 1, field
    with pytest.raises(ValueError, match="at least 1"):
        Sizes(0, True, 1, 1, 1, 1, 1)
    assert [s.name for s in STEPS][:1] == ["pytest-gpu"] and len({s.name for s in STEPS}) == len(STEPS)


def test_overlap_is_the_share_of_the_shorter_of_copy_and_compute_that_was_hidden() -> None:
    assert overlap_fraction(2.0, 3.0, 3.0) == 1.0, "copy wholly hidden behind compute"
    assert overlap_fraction(2.0, 3.0, 5.0) == 0.0, "one after the other"
    assert overlap_fraction(2.0, 3.0, 4.0) == 0.5
    assert overlap_fraction(2.0, 3.0, 6.0) == -0.5, "worse than serial: the prefetcher's own cost shows"
    with pytest.raises(ValueError, match="must be positive"):
        overlap_fraction(0.0, 3.0, 3.0)
    assert iterations_for(copy_ms=2.0, one_iteration_ms=0.1, ratio=1.0) == 20
    assert iterations_for(copy_ms=0.01, one_iteration_ms=0.1, ratio=1.0) == 1


@no_cuda_here
def test_the_overlap_bench_alone_refuses_a_machine_without_cuda_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "bench/h2d_overlap.py", "--json"],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert (
        "--device cuda: this bench times CUDA copies and needs a CUDA device" in done.stderr.splitlines()[-1]
    )


def test_the_vllm_steps_run_the_generation_bench_on_vllm_in_bf16_and_fp16_and_a_cpu_rehearses_bf16(
    tmp_path: Path,
) -> None:
    import importlib.util

    from bench.gpu_steps import Context

    steps = {step.name: step for step in STEPS}
    cuda = Context(python=sys.executable, root=CHECKOUT, work=tmp_path, generator="/models/lm")
    cpu = Context(python=sys.executable, root=CHECKOUT, work=tmp_path, generator="/models/lm", device="cpu")
    assert steps["generate-vllm-fp16"].plan(cpu) == (
        "fp16 is not rehearsed on a CPU (the bf16 step rehearses vLLM, in float32)"
    )
    if importlib.util.find_spec("vllm") is None:
        for name in ("generate-vllm", "generate-vllm-fp16"):
            assert "vllm is not installed" in str(steps[name].plan(cuda)), "skipped, saying why"
        return
    dtypes = {}
    for name, ctx in (("generate-vllm", cuda), ("generate-vllm-fp16", cuda), ("generate-vllm", cpu)):
        plan = steps[name].plan(ctx)
        assert isinstance(plan, Planned), plan
        (command,) = plan.commands
        assert command[1:3] == ("bench/generate.py", "--device") and "--engine" in command, command
        assert command[command.index("--engine") + 1] == "vllm" and "--json" in command
        dtypes[name, ctx.device] = [a for a in command if a.startswith("dtype=")]
    assert dtypes == {
        ("generate-vllm", "cuda"): ["dtype=bfloat16"],
        ("generate-vllm-fp16", "cuda"): ["dtype=float16"],
        ("generate-vllm", "cpu"): ["dtype=float32"],
    }
    plan = steps["generate-vllm"].plan(cuda)
    assert isinstance(plan, Planned)
    said = json.dumps({"rows": 8, "dtype": "bfloat16", "tokens_per_s": 9.5, "ratio_vs_bare_vllm": 0.97})
    figures = {line["figure"]: line for line in plan.read(said).figures}
    assert figures["ratio_vs_bare_vllm"]["unit"] == "x" and figures["tokens_per_s"]["precision"] == "bf16"
    assert figures["tokens_per_s"]["rows"] == 8 and figures["tokens_per_s"]["model"] == "/models/lm"
