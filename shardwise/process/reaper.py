"""Kill what a killed process started and left running: a guard process beside a local cluster.

Most processes a run starts die with it: the process pool's workers by
:mod:`shardwise.process.lifeline`, a local Dask cluster's by Dask's watch on their
nanny, a local Ray node's raylet and workers by Ray's own fate sharing. A
local Ray node's **agents** (the dashboard agent, the runtime-env agent) do
not: they are the raylet's children, and once it is gone they try for 60 s
to report its death to Ray's GCS, gone too, before they exit.

:func:`reaping` starts a guard, ``python -I reaper.py PARENT``, for as long
as such a cluster runs. Every :data:`POLL_S` seconds the guard notes the
processes below PARENT that were not there when it started. When PARENT
ends without standing it down (PARENT's end of the guard's stdin closes
with it), the guard SIGKILLs each noted process that still runs with the
same start (see :mod:`shardwise.process.procfs`: a pid may have been reused). A
normal end stands the guard down: it reads ``stop`` and exits, killing
nothing. What existed before it started (Prefect's temporary server, which
its own guard stops gently) is left alone.

The guard runs this file by path, without the ``shardwise`` package (whose
import loads torch): it starts in a few milliseconds and stays small.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["POLL_S", "guard", "reaping"]

POLL_S = 1.0
"""Seconds between the guard's looks at the processes below its parent (a scan of ``/proc``)."""


@contextlib.contextmanager
def reaping() -> Iterator[None]:
    """While the block runs, a guard kills what this process starts if this process is killed."""
    argv = [sys.executable, "-I", __file__, str(os.getpid())]
    watcher = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert watcher.stdout is not None
    watcher.stdout.readline()  # "ready": what runs from now on is new to it
    try:
        yield
    finally:
        _stand_down(watcher)


def _stand_down(watcher: subprocess.Popen[bytes]) -> None:
    assert watcher.stdin is not None
    with contextlib.suppress(OSError):  # it ended already
        watcher.stdin.write(b"stop\n")
        watcher.stdin.close()
    try:
        watcher.wait(timeout=10)
    except subprocess.TimeoutExpired:
        watcher.kill()


def guard(parent: int, orders: IO[bytes], ready: IO[bytes]) -> None:
    """Note what starts below ``parent``; once it ends unless told ``stop`` on ``orders``, kill that.

    ``ready`` gets a line once what runs below ``parent`` already is noted as not the guard's to end.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the parent decides
    procfs, me = _procfs(), os.getpid()
    before = set(procfs.descendants(parent).items())
    ready.write(b"ready\n")
    ready.close()
    told, ended = threading.Event(), threading.Event()

    def listen() -> None:
        if orders.readline().strip() == b"stop":
            told.set()
        ended.set()  # told, or end of file: the parent is gone

    threading.Thread(target=listen, name="shardwise-reaper-orders", daemon=True).start()
    noted: dict[int, str] = {}
    while not ended.wait(POLL_S) and os.getppid() == parent:
        # Kept, never replaced: a look just after the parent's death finds nothing below it (its
        # children are reparented), and must not forget what the looks before it found.
        now = procfs.descendants(parent)
        noted.update((pid, start) for pid, start in now.items() if pid != me and (pid, start) not in before)
    if told.is_set():
        return
    for pid, start in noted.items():
        if procfs.started(pid) == start:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _procfs() -> Any:
    """:mod:`shardwise.process.procfs`: by package when imported, by path when this file runs as the guard."""
    if __package__:
        from shardwise.process import procfs

        return procfs
    spec = importlib.util.spec_from_file_location("_shardwise_procfs", Path(__file__).with_name("procfs.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    guard(int(sys.argv[1]), sys.stdin.buffer, sys.stdout.buffer)
