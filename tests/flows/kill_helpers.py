"""SIGKILL a ``shardwise run`` subprocess once its workers score rows, and check what it left running."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

__all__ = ["cli", "kill_once_scoring", "paced", "survivors"]


def cli(*argv: str) -> list[str]:
    """The ``shardwise`` command line, as a subprocess runs it."""
    return [sys.executable, "-m", "shardwise.flows.cli", *argv]


def paced(counts: Path, rows_per_s: float, *argv: str) -> list[str]:
    """The ``shardwise`` command line under ``counted_cli.py``: its rows counted into ``counts`` and
    scored at most ``rows_per_s`` a second, so that a kill lands mid-shard on a machine of any speed
    without a run of tens of thousands of rows."""
    return [
        sys.executable,
        str(Path(__file__).with_name("counted_cli.py")),
        str(counts),
        str(rows_per_s),
        *argv,
    ]


def kill_once_scoring(
    argv: list[str], *, workers: str | tuple[str, ...] = "", rows: int = 1
) -> dict[psutil.Process, str]:
    """Start the command (with ``--progress lines``), SIGKILL it once its progress shows ``rows`` scored
    and a shard still to do.

    Returns every descendant it had then, with its command line; among them at
    least one whose command line contains ``workers`` (a worker process), or one of them: a process may
    retitle itself (Dask's workers do, as ``dask worker [...]``, once ``setproctitle`` is installed).
    """
    proc = subprocess.Popen(
        [*argv, "--progress", "lines", "--progress-every", "0.2"], stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    found: dict[psutil.Process, str] = {}
    lines = []
    for line in proc.stderr:
        lines.append(line)
        done = re.search(r"progress: (\d+)/(\d+) shards?, ([\d,]+)/", line)
        if done and int(done[1]) < int(done[2]) and int(done[3].replace(",", "")) >= rows:
            found = _descendants(proc.pid)
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it was killed:\n" + "".join(lines[-20:])
    marks = (workers,) if isinstance(workers, str) else workers
    assert any(mark in name for name in found.values() for mark in marks), sorted(found.values())
    return found


def survivors(processes: dict[psutil.Process, str], within_s: float) -> list[str]:
    """The command lines of ``processes`` still running after ``within_s`` seconds (zombies are dead);
    those are then killed, so that a failed test leaves nothing behind either."""
    deadline = time.monotonic() + within_s
    while True:
        alive = [p for p in processes if _running(p)]
        if not alive or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    return [processes[p] for p in alive]


def _descendants(pid: int) -> dict[psutil.Process, str]:
    found = {}
    for child in psutil.Process(pid).children(recursive=True):
        try:
            found[child] = " ".join(child.cmdline())[:120]
        except psutil.Error:  # ended meanwhile
            continue
    return found


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
