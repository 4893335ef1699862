"""One worker per GPU: the host-wide device lease, tested by faking the device count on a CPU."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import torch

from shardwise.batch.device_lease import leased_device


def fake(lock_dir: Path, gpus: int = 2) -> dict:
    """Lease arguments for a host with ``gpus`` CUDA devices, whatever this machine has."""
    return {
        "lock_dir": lock_dir,
        "device_count": lambda: gpus,
        "ident": lambda i: f"GPU-fake-{i}",
        "resolve": lambda policy: torch.device(policy if policy != "auto" else "cuda"),
    }


def test_workers_at_once_get_distinct_gpus(tmp_path: Path) -> None:
    with ExitStack() as stack:
        held = [stack.enter_context(leased_device("cuda", **fake(tmp_path))) for _ in range(2)]
        assert sorted(str(d) for d in held) == ["cuda:0", "cuda:1"]


def test_a_third_worker_waits_for_a_gpu_instead_of_sharing_one(tmp_path: Path) -> None:
    got: list[tuple[str, float]] = []
    with ExitStack() as stack:
        for _ in range(2):
            stack.enter_context(leased_device("cuda", **fake(tmp_path)))

        def third() -> None:
            with leased_device("cuda", **fake(tmp_path)) as device:
                got.append((str(device), time.monotonic()))

        waiter = threading.Thread(target=third)
        waiter.start()
        time.sleep(0.6)
        assert not got, "both GPUs are leased: the third worker must wait"
        released = time.monotonic()
    waiter.join(5)
    assert got and got[0][0] in ("cuda:0", "cuda:1") and got[0][1] >= released


def test_distinct_gpus_are_not_serialised(tmp_path: Path) -> None:
    """Two workers on two GPUs hold their leases at the same time."""
    barrier = threading.Barrier(2, timeout=5)
    seen: list[str] = []

    def worker() -> None:
        with leased_device("cuda", **fake(tmp_path)) as device:
            seen.append(str(device))
            barrier.wait()  # both inside their lease at once, or this times out

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(seen) == ["cuda:0", "cuda:1"]


def test_a_named_gpu_is_leased_alone_and_a_thread_prefers_its_last_gpu(tmp_path: Path) -> None:
    with leased_device("cuda:1", **fake(tmp_path)) as device:
        assert str(device) == "cuda:1"
    for _ in range(3):
        with leased_device("cuda", **fake(tmp_path)) as device:
            assert str(device) == "cuda:1", "the model is already loaded there"


def test_a_cpu_needs_no_lease(tmp_path: Path) -> None:
    with leased_device("cpu", lock_dir=tmp_path) as device:
        assert device == torch.device("cpu")
    assert not list(tmp_path.iterdir())


def test_a_worker_killed_while_holding_a_gpu_releases_it(tmp_path: Path) -> None:
    holder = (
        "import fcntl, time\n"
        f"f = open({str(tmp_path / 'GPU-fake-0.lock')!r}, 'ab')\n"
        "fcntl.flock(f.fileno(), fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    got: list[str] = []

    def waiter() -> None:
        with leased_device("cuda", **fake(tmp_path, gpus=1)) as device:
            got.append(str(device))

    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.6)
        assert not got, "the only GPU is held by another process"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
    thread.join(5)
    assert got == ["cuda:0"], "the kernel released the dead worker's lease"
