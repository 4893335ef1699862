"""Lease owners name a process exactly (pid and start), and only a process of this host that is sure to have
ended counts as gone: not one on another host, in another pid namespace, or written without its start."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from shardwise.process import procfs
from shardwise.results.owners import Owner, owner_gone, owner_of

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _ended_child() -> Owner:
    """A process of this host that ran and ended, as its owner string named it."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    start = procfs.started(child.pid)
    child.kill()
    child.wait()
    return Owner(socket.gethostname(), child.pid, 0, start, procfs.pid_namespace())


def test_an_owner_string_names_host_pid_thread_and_start_and_old_ones_still_parse() -> None:
    mine = Owner.parse(owner_of("gpu1", 3))
    assert mine is not None and (mine.host, mine.pid, mine.thread) == ("gpu1", os.getpid(), 3)
    assert mine.start == procfs.started(os.getpid()) and mine.namespace == procfs.pid_namespace()
    assert str(mine) == owner_of("gpu1", 3) == f"gpu1:{os.getpid()}/3@{mine.namespace}:{mine.start}"
    assert Owner.parse("gpu1:4242/0") == Owner("gpu1", 4242, 0), "written before starts were recorded"
    assert Owner.parse("a:b:4242/0@7") == Owner("a:b", 4242, 0, "7"), "no namespace (not Linux)"
    assert Owner.parse("not an owner") is None


def test_only_an_ended_process_of_this_host_and_pid_namespace_is_gone() -> None:
    host = socket.gethostname()
    assert not owner_gone(owner_of(host, 0)), "this process runs"
    ended = _ended_child()
    assert owner_gone(str(ended))
    assert not owner_gone(f"{host}:{ended.pid}/0"), "no start recorded: nothing is sure, the lease holds"
    assert not owner_gone(str(Owner("another-host", ended.pid, 0, ended.start, ended.namespace)))
    assert not owner_gone(str(Owner(host, ended.pid, 0, ended.start, "1"))), "another pid namespace"
    reused = Owner(host, os.getpid(), 0, "1", procfs.pid_namespace())
    assert owner_gone(str(reused)), "its pid runs, but as another process (pid reuse)"
    assert not owner_gone(None) and not owner_gone("garbage")


def test_a_zombie_has_ended() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    start = procfs.started(child.pid)
    assert start is not None
    while procfs.is_running(child.pid, start):  # it exits; nobody has waited for it yet
        os.sched_yield()
    assert procfs.started(child.pid) == start, "still in the process table, as a zombie"
    child.wait()
    assert procfs.is_running(child.pid, start) is False
