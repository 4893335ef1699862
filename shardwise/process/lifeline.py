"""Tie a worker process's life to its parent's, so a killed run leaves no worker behind.

A run's local worker processes (the process pool's, a local Dask cluster's)
hold database connections, a snapshot, a GPU. When the process that started
them is killed (SIGKILL, the OOM killer, a scheduler's timeout) nothing runs
its clean-up, and such a worker would score on, orphaned, until its shard
ends or forever. :func:`die_with_parent`, called first thing in the child
(a pool's ``initializer``), ends the child when its parent ends, two ways:

- **Linux**: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``. The kernel kills the
  child the moment its parent goes, even while the child holds the GIL in a
  long C call. Linux sends it when the *thread* that started the child ends,
  not only the process, so it is only safe where that thread lives as long
  as the child is needed: a :class:`~concurrent.futures.ProcessPoolExecutor`
  starts its workers from the threads that submit (Prefect's runner: its
  resolver pool) and from its manager thread, all of which live until the
  pool shuts down.
- **Every POSIX system** (macOS too; on Linux as a second line): a daemon thread
  that polls ``os.getppid()`` every :data:`POLL_S` seconds; once the parent
  is gone the child is re-parented (to init or a sub-reaper) and the thread
  ends the process with :data:`ORPHAN_EXIT`.

The parent's pid is passed in, not read in the child, because the parent may
already be gone when the child starts: then the child exits at once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

__all__ = ["ORPHAN_EXIT", "POLL_S", "die_with_parent"]

POLL_S = 0.5
"""Seconds between the watcher thread's looks at the parent pid."""
ORPHAN_EXIT = 70
"""The exit status of a child that ended because its parent was gone (EX_SOFTWARE)."""
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def die_with_parent(parent: int) -> None:
    """End this process when process ``parent`` (its parent) ends; exit now if it has already ended.

    Meant as the ``initializer`` of a pool of worker processes, with the
    planning process's ``os.getpid()`` as its argument (see the module docstring).
    """
    # Ctrl-C reaches the terminal's whole process group, workers too: a worker would die with a
    # KeyboardInterrupt traceback of its own on the terminal. The parent decides (flows/interrupts.py),
    # and its workers end with it.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    _arm_parent_death_signal()
    if os.getppid() != parent:  # the parent ended before the signal was armed
        os._exit(ORPHAN_EXIT)
    watcher = threading.Thread(target=_watch, args=(parent,), name="shardwise-lifeline", daemon=True)
    watcher.start()


def _arm_parent_death_signal() -> bool:
    """Ask Linux to SIGKILL this process when its parent (thread) ends; whether it could."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)) == 0
    except (OSError, AttributeError):  # no libc to load (a static build): the watcher still works
        return False


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os._exit(ORPHAN_EXIT)
