"""A worker process told to stop (SIGTERM) lets its shard go at the next row and exits 0.

Real processes and real signals: a spawned child installs the handler as a
pool worker does (:func:`drain_on_sigterm`), then walks rows the way
:func:`~shardwise.pipeline.shard.score_shard` does. The runs with the
process pool and Dask are in ``tests/flows/test_worker_preemption.py``.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from shardwise.errors import WorkerPreempted
from shardwise.pipeline.preemption import (
    LEAVE_AFTER_S,
    PREEMPTED,
    Leave,
    drain_on_sigterm,
    draining,
    refuse_if_draining,
    shard_in_hand,
    until_preempted,
)

EXIT_WITHIN_S = 10.0
"""The child must be gone this soon after SIGTERM: a row of 20 ms, then LEAVE_AFTER_S, plus slack."""


def _rows(seen: Path) -> object:
    for n in range(10_000):
        seen.write_text(str(n))
        time.sleep(0.02)
        yield n


def _worker(seen: str, said: str, leave: Leave) -> None:
    assert drain_on_sigterm(leave)
    with shard_in_hand():
        try:
            for _ in until_preempted(_rows(Path(seen)), shard_id=3):
                pass
        except WorkerPreempted as exc:
            Path(said).write_text(str(exc))
    Path(said + ".returned").touch()  # the task returned: its result would reach the pool
    time.sleep(60)  # the process must leave by itself once the shard was let go


def _idle(ready: str) -> None:
    assert drain_on_sigterm()
    Path(ready).touch()
    time.sleep(60)


def _ended(process: multiprocessing.process.BaseProcess, within_s: float) -> float:
    started = time.monotonic()
    process.join(within_s)
    waited = time.monotonic() - started
    if process.is_alive():
        process.kill()
        process.join()
        pytest.fail(f"the worker was still running {within_s} s after SIGTERM")
    return waited


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 60
    while not path.exists() or not path.read_text() or int(path.read_text() or 0) < 5:
        assert time.monotonic() < deadline, f"{path} never showed the child at work"
        time.sleep(0.05)


@pytest.mark.parametrize("leave", ["after_result", "holding_task"])
def test_a_worker_holding_a_shard_lets_it_go_and_exits_0(tmp_path: Path, leave: Leave) -> None:
    seen, said = tmp_path / "seen", tmp_path / "said"
    child = multiprocessing.get_context("spawn").Process(target=_worker, args=(str(seen), str(said), leave))
    child.start()
    _wait_for(seen)
    os.kill(child.pid or 0, signal.SIGTERM)
    at = int(seen.read_text())
    waited = _ended(child, EXIT_WITHIN_S)
    assert child.exitcode == 0
    assert said.read_text().startswith(f"{PREEMPTED}: shard 3 was let go")
    assert int(seen.read_text()) <= at + 2, "it went on taking rows after SIGTERM"
    returned = Path(f"{said}.returned").exists()
    if leave == "after_result":  # the pool gets the task's error first
        assert returned and waited >= LEAVE_AFTER_S * 0.5, "it left before its task could return"
    else:  # Dask: gone while it holds the task, so the scheduler runs the task elsewhere
        assert not returned and waited < LEAVE_AFTER_S


def test_an_idle_worker_exits_0_at_once(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    child = multiprocessing.get_context("spawn").Process(target=_idle, args=(str(ready),))
    child.start()
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.05)
    os.kill(child.pid or 0, signal.SIGTERM)
    waited = _ended(child, EXIT_WITHIN_S)
    assert child.exitcode == 0
    assert waited < LEAVE_AFTER_S, "an idle worker has nothing to let go, so it need not wait"


def test_a_process_not_told_to_stop_takes_every_row() -> None:
    assert not draining()
    refuse_if_draining(0)
    assert list(until_preempted(range(5), shard_id=0)) == [0, 1, 2, 3, 4]
