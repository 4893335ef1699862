"""A worker process that called ``die_with_parent`` ends when its parent is SIGKILLed: by Linux's parent-death
signal, or by the watcher thread alone where that signal is not armed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from shardwise.process import lifeline

# The child loads lifeline.py by path: importing the shardwise package would load torch (seconds).
_CHILD = textwrap.dedent(
    """
    import importlib.util, os, sys, time
    spec = importlib.util.spec_from_file_location("lifeline", {path!r})
    lifeline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lifeline)
    if not {arm}:
        lifeline._arm_parent_death_signal = lambda: False
    lifeline.die_with_parent(int(sys.argv[1]))
    print("ready", flush=True)
    time.sleep(120)
    """
)
# The parent starts the child, says its pid once the child is ready, and waits to be killed.
_PARENT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid())], stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout.readline().strip() == "ready"
    print(child.pid, flush=True)
    time.sleep(120)
    """
)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("arm", [True, False], ids=["parent-death-signal", "watcher-only"])
def test_a_child_ends_within_a_second_of_its_parents_sigkill(arm: bool) -> None:
    if arm and not sys.platform.startswith("linux"):
        pytest.skip("the parent-death signal is Linux's")
    child_code = _CHILD.format(path=lifeline.__file__, arm=arm)
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, child_code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert not _gone(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 1 + 2 * lifeline.POLL_S
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(child), "the child outlived its parent"
    finally:
        parent.kill()


def test_a_child_whose_parent_is_gone_already_exits_at_once() -> None:
    code = _CHILD.format(path=lifeline.__file__, arm=True)
    done = subprocess.run(
        [sys.executable, "-c", code, str(os.getpid() + 10**6)], capture_output=True, timeout=60
    )
    assert done.returncode == lifeline.ORPHAN_EXIT and b"ready" not in done.stdout
