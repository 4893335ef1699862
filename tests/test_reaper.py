"""The reaper kills what its parent started after it once the parent is SIGKILLed, and nothing when stood
down; the process table reads (start tokens, descendants) it relies on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from shardwise.process import procfs, reaper

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# A parent that runs a sleeper, then the reaper, then a grandchild that a child of its own starts (as
# a raylet starts its agents); it prints their pids and waits.
_PARENT = textwrap.dedent(
    """
    import importlib.util, os, subprocess, sys, time
    spec = importlib.util.spec_from_file_location("reaper", {path!r})
    reaper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reaper)
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    before = subprocess.Popen(sleep)
    with reaper.reaping():
        starter = ("import subprocess, sys, time; p = subprocess.Popen(sys.argv[1:]); "
                   "print(p.pid, flush=True); time.sleep(120)")
        middle = subprocess.Popen([sys.executable, "-c", starter, *sleep], stdout=subprocess.PIPE, text=True)
        grandchild = int(middle.stdout.readline())
        time.sleep(3 * reaper.POLL_S)  # the reaper has noted them
        print(before.pid, middle.pid, grandchild, flush=True)
        if not {stand_down}:
            time.sleep(120)  # killed here, the reaper still on guard
        middle.kill(); middle.wait()
    print("stood down", flush=True)
    time.sleep(120)
    """
)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _parent(pid: int) -> int | None:
    try:
        return psutil.Process(pid).ppid()
    except psutil.NoSuchProcess:
        return None


def _start(stand_down: bool) -> tuple[subprocess.Popen[str], list[int]]:
    code = _PARENT.format(path=reaper.__file__, stand_down=stand_down)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    return parent, [int(pid) for pid in parent.stdout.readline().split()]


def test_a_sigkilled_parents_later_processes_are_killed_and_the_earlier_left_alone() -> None:
    parent, (before, middle, grandchild) = _start(stand_down=False)
    try:
        assert procfs.started(grandchild) is not None and _running(grandchild)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 5
        while (_running(middle) or _running(grandchild)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(middle) and not _running(grandchild), "what it started after the reaper is gone"
        assert _running(before), "what ran before the reaper started is not its to end"
    finally:
        for pid in (before, middle, grandchild):
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_reaper_stood_down_kills_nothing() -> None:
    parent, (before, _middle, grandchild) = _start(stand_down=True)  # the middle one ends on its own
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "stood down"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        time.sleep(3 * reaper.POLL_S)
        assert _running(grandchild) and _running(before)
    finally:
        for pid in (before, grandchild):
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_start_token_names_one_process_and_descendants_go_all_the_way_down() -> None:
    assert procfs.started(os.getpid()) == procfs.started(os.getpid()) is not None
    assert procfs.started(2**22 + 1) is None, "no such pid"
    assert procfs.pid_namespace() is not None
    child = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(60)",
         sys.executable, "-c", "import time; time.sleep(60)"]
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while True:
            below = procfs.descendants(os.getpid())
            grandchildren = [pid for pid in below if _parent(pid) == child.pid]
            if grandchildren or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert child.pid in below and below[child.pid] == procfs.started(child.pid)
        assert len(grandchildren) == 1
    finally:
        for process in psutil.Process(child.pid).children(recursive=True):
            process.kill()
        child.kill()
