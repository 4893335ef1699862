"""Preloaded into each worker process of a local Dask cluster: it exits without the interpreter's clean-up.

When the run ends, the cluster asks each worker process to stop and kills
any still alive after 4 s ("Worker process still alive after 4.0 seconds,
killing"). A worker that had loaded a model was always still alive: freeing
torch's, transformers' and Prefect's modules one by one at interpreter exit
takes seconds on a busy machine, so every local Dask run waited 4 s at its
end. Registered when the worker starts (:func:`dask_setup`), before Prefect's
own exit handlers in that process, this one runs last: Prefect's event and
log flushes still run first, then the process ends at once, as the
``shardwise`` console script itself does (:func:`shardwise.flows.cli.entry`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import Any

from shardwise.pipeline.preemption import drain_on_sigterm

__all__ = ["dask_setup"]


def dask_setup(worker: Any) -> None:
    """Dask's preload hook, called once in the worker process as it starts; SIGTERM then drains the
    worker: it lets its shard go and exits 0 before the task returns, so Dask runs the task again on
    another worker (see :mod:`shardwise.pipeline.preemption`)."""
    atexit.register(_exit_now)
    drain_on_sigterm("holding_task")


def _exit_now() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stream: nothing more to say
            stream.flush()
    os._exit(0)
