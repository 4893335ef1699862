"""One worker per GPU: a shard holds a host-wide lease on the one device it runs on.

Whatever runs the shard tasks (threads of one process, a process pool, Dask
or Ray workers, several flow runs at once), a shard on CUDA first takes an
exclusive lock on one GPU of its host: a file lock under
``<tmp>/shardwise-devices/``, named after the GPU's UUID, held until the
shard ends. So two workers never share a GPU by accident, and distinct GPUs
are never serialised. The lock is the kernel's (``flock``): a worker that dies
releases it with its process.

A worker prefers the GPU it used last, where its model is already loaded,
and takes any free one otherwise; with all of them held it waits. When the
runner already isolates devices (Ray's ``num_gpus=1``, a Kubernetes pod with
one GPU) the worker sees one device, and the lease is uncontended. On a CPU
there is nothing to lease.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import torch

from shardwise.batch.device import resolve_device

__all__ = ["DEFAULT_LOCK_DIR", "device_uuid", "leased_device"]

DEFAULT_LOCK_DIR = Path(tempfile.gettempdir()) / "shardwise-devices"
_POLL_S = 0.2
_last = threading.local()


def device_uuid(index: int) -> str:
    """The GPU's UUID, which names it the same whatever ``CUDA_VISIBLE_DEVICES`` a process has."""
    return str(torch.cuda.get_device_properties(index).uuid)


def _try_lock(path: Path) -> IO[bytes] | None:
    handle = path.open("ab")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _order(candidates: Sequence[int]) -> list[int]:
    """The device this thread used last first, so its loaded model is reused."""
    last = getattr(_last, "index", None)
    return sorted(candidates, key=lambda i: (i != last, i))


@contextmanager
def leased_device(
    policy: str,
    *,
    lock_dir: Path = DEFAULT_LOCK_DIR,
    device_count: Callable[[], int] = torch.cuda.device_count,
    ident: Callable[[int], str] = device_uuid,
    resolve: Callable[[str], torch.device] = resolve_device,
) -> Iterator[torch.device]:
    """The device to run on under ``policy`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``), leased while in use.

    ``cuda`` and ``auto`` on a CUDA host lease any one visible GPU;
    ``cuda:N`` leases that one. ``device_count``, ``ident`` and ``resolve``
    are there so the choice can be tested without a GPU.
    """
    device = resolve(policy)
    if device.type != "cuda":
        yield device
        return
    candidates = [device.index] if device.index is not None else list(range(device_count()))
    lock_dir.mkdir(parents=True, exist_ok=True)
    while True:
        for index in _order(candidates):
            handle = _try_lock(lock_dir / f"{ident(index)}.lock")
            if handle is None:
                continue
            try:
                handle.truncate(0)
                handle.write(f"{os.getpid()}\n".encode())
                handle.flush()
                _last.index = index
                yield torch.device("cuda", index)
            finally:
                handle.close()  # closing the file releases the lock
            return
        time.sleep(_POLL_S)  # every GPU is leased: wait for one to come free
