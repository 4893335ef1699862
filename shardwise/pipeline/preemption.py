"""A worker told to stop (SIGTERM: a spot instance's notice, a pod's eviction) lets its shard go, exits 0.

The run goes on without it. :func:`drain_on_sigterm`, called as a worker
process starts (the process pool's initializer, a Dask worker's preload),
installs a SIGTERM handler that only notes the request when a shard is in
hand, and ends the process at once, with status 0, when none is:

1. The shard stops after the batch being scored (the engine's per-batch
   callback calls :func:`refuse_if_draining`), or at the next row it hands
   over (:func:`until_preempted`), whichever comes first: the stop waits at
   most for one forward pass. The chunk in hand is abandoned, not
   committed: its transaction never opens, and the next attempt scores its
   rows again after the chunks already committed (a chunk is committed
   once, whichever attempt gets there first, see
   :mod:`~shardwise.results.chunk_writer`). A shard task that starts on a
   draining worker stops before it counts an attempt.
2. :class:`~shardwise.errors.WorkerPreempted` ends the attempt; the task
   records the shard as ``retrying`` with the reason, which releases it
   (the shard is no longer ``running``; workers never wait on a shard's
   lease).
3. Once the process holds no shard (:func:`shard_in_hand`), it exits 0, in
   one of two ways, chosen by whoever installed the handler
   (:data:`Leave`):

   - ``after_result`` (the process pool): the task raises the error, and
     the process exits :data:`LEAVE_AFTER_S` seconds later, time for the
     error to reach the flow, which schedules the shard again on fresh
     workers (a worker's exit breaks a process pool; see
     ``shardwise/tasks/fanout.py``).
   - ``holding_task`` (Dask): the process exits before the task returns,
     so Dask reschedules the task on another worker at once, as for any
     worker it loses, and the nanny starts a new worker process. A result
     would have been lost with the worker anyway: Dask keeps results on the
     worker that computed them, and would compute the task again.

Nothing here imports Prefect: the handler and the flag belong to the worker process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Literal, TypeVar

from shardwise.errors import WorkerPreempted

__all__ = [
    "LEAVE_AFTER_S",
    "PREEMPTED",
    "Leave",
    "drain_on_sigterm",
    "draining",
    "refuse_if_draining",
    "shard_in_hand",
    "until_preempted",
]

LEAVE_AFTER_S = 2.0
"""Seconds a draining worker waits, once its last shard let go, before it exits 0."""
PREEMPTED = "worker preempted (SIGTERM)"
"""The reason a shard let go by a draining worker records (its transition's error starts with it)."""

Leave = Literal["after_result", "holding_task"]
"""How a draining worker leaves once its shard is let go (see the module)."""

_T = TypeVar("_T")
_draining = threading.Event()
_lock = threading.Lock()
_in_hand = 0
_leave_how: list[Leave] = ["after_result"]


def drain_on_sigterm(leave: Leave = "after_result") -> bool:
    """Make SIGTERM drain this worker process, which then leaves as ``leave`` says (see the module);
    whether the handler is installed.

    Only the main thread may install a handler; elsewhere nothing changes and this answers False.
    """
    _leave_how[0] = leave
    if threading.current_thread() is not threading.main_thread():
        return False
    signal.signal(signal.SIGTERM, _on_sigterm)
    return True


def draining() -> bool:
    """Whether this process was told to stop and lets its shards go."""
    return _draining.is_set()


def refuse_if_draining(shard_id: int) -> None:
    """Raise :class:`WorkerPreempted` when this process is draining: it starts no more work."""
    if _draining.is_set():
        raise WorkerPreempted(
            f"{PREEMPTED}: shard {shard_id} was let go after the batch in hand, its chunk in hand abandoned "
            "uncommitted; another worker scores it on from the committed chunks"
        )


def until_preempted(items: Iterable[_T], shard_id: int) -> Iterator[_T]:
    """``items``, until this process drains: then :class:`WorkerPreempted` before the next one."""
    for item in items:
        refuse_if_draining(shard_id)
        yield item


@contextlib.contextmanager
def shard_in_hand() -> Iterator[None]:
    """Around a shard task: while one runs, SIGTERM only drains; once none does, a draining process leaves."""
    global _in_hand
    with _lock:
        _in_hand += 1
    try:
        yield
    finally:
        with _lock:
            _in_hand -= 1
            idle = _in_hand == 0
        if idle and _draining.is_set():
            _leave_soon()


def _leave_soon() -> None:
    if _leave_how[0] == "holding_task":
        _leave(flush_logs=True)
    timer = threading.Timer(LEAVE_AFTER_S, _leave, kwargs={"flush_logs": True})
    timer.daemon = True
    timer.start()


def _on_sigterm(signum: int, frame: object) -> None:
    _draining.set()
    with _lock:
        idle = _in_hand == 0
    if idle:
        _leave()


def _leave(*, flush_logs: bool = False) -> None:
    """Exit 0 now: the shard was let go and recorded, so nothing is lost (and no clean-up is owed).

    With ``flush_logs``, the logging handlers first send what they hold (the
    task's last lines go to the orchestrator's log of it); never from the
    signal handler, which may have interrupted a handler holding its lock.
    """
    if flush_logs:
        with contextlib.suppress(Exception):  # leaving must not fail on a handler that cannot flush
            logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(0)
