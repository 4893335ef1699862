"""Run a GPU step's commands under its time limit, its output kept in the run's log, and read it.

Each command runs in a process group of its own, so a step that overruns
its share of the budget is stopped with everything it started (a bench's
own workers too) and the next step still gets its time. Output goes to
files, not pipes: a command that prints a lot cannot block, and what it
printed before it was stopped is still there to read.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.gpu_lines import Outcome, error_line
from bench.gpu_steps import Planned

__all__ = ["Finished", "StepResult", "run_command", "run_step"]

_GRACE_S = 5.0
"""After SIGTERM, how long a stopped command's processes get to exit before SIGKILL."""


@dataclass(frozen=True)
class Finished:
    command: tuple[str, ...]
    returncode: int | None
    """None when the command was stopped at its time limit."""
    seconds: float
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def run_command(command: Sequence[str], timeout_s: float, cwd: Path, scratch: Path, log: Path) -> Finished:
    """Run ``command`` in ``cwd`` for at most ``timeout_s``; append what it printed to ``log``."""
    out, err = scratch / "stdout.txt", scratch / "stderr.txt"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            list(command), cwd=cwd, stdout=stdout, stderr=stderr, env=env, start_new_session=True
        )
        try:
            code: int | None = proc.wait(timeout=max(timeout_s, 0.1))
        except subprocess.TimeoutExpired:
            _stop(proc)
            code = None
        except BaseException:  # Ctrl-C here: its own session would not get the SIGINT, so stop it too
            _stop(proc)
            raise
    finished = Finished(
        tuple(command),
        code,
        time.monotonic() - started,
        out.read_text(errors="replace"),
        err.read_text(errors="replace"),
    )
    with log.open("a", encoding="utf-8") as file:
        ended = "stopped at its time limit" if code is None else f"exit code {code}"
        file.write(f"\n===== {' '.join(command)}\n===== {ended} after {finished.seconds:.1f}s\n")
        file.write(finished.stdout)
        file.write(finished.stderr)
    return finished


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the command's process group: SIGTERM, then SIGKILL if it is still there after a grace time."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


@dataclass(frozen=True)
class StepResult:
    outcome: Outcome
    lines: list[dict[str, object]]
    """Its figure lines, then its error line if it failed."""
    seconds: float


def run_step(
    name: str,
    plan: Planned,
    seconds: float,
    root: Path,
    scratch: Path,
    log: Path,
    context: Mapping[str, object],
) -> StepResult:
    """Run ``plan``'s commands one after the other, all within ``seconds``, and read the last one's output."""
    left = seconds
    for i, command in enumerate(plan.commands):
        done = run_command(command, left, root, scratch, log)
        left -= done.seconds
        if done.timed_out:
            why = (
                f"stopped after {seconds:.0f}s, its share of --budget-s; give more, or --quick, or --only it"
            )
            return StepResult(
                "failed", [error_line(name, why, command=" ".join(command), **context)], seconds
            )
        if done.returncode not in (plan.accept if i == len(plan.commands) - 1 else {0}):
            error = error_line(name, f"exit code {done.returncode}: {done.stderr}", **context)
            return StepResult("failed", [error], seconds - left)
    try:
        readout = plan.read(done.stdout)
    except Exception as exc:  # output the step could not be read from: its error, not the run's
        return StepResult(
            "failed", [error_line(name, f"{type(exc).__name__}: {exc}", **context)], seconds - left
        )
    if readout.error is None:
        return StepResult("ok", readout.figures, seconds - left)
    return StepResult(
        "failed", [*readout.figures, error_line(name, readout.error, **context)], seconds - left
    )
