"""The prefetcher: overlap, bounded look-ahead, error hand-off, and a thread that always stops."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import torch

from shardwise.batch.prefetch import Prefetcher
from shardwise.batch.windows import Batch, Window
from shardwise.model import ModelInputs

CPU = torch.device("cpu")


def _batch(i: int) -> Batch:
    window = Window(0, [i], {}, [False])
    return Batch(window, [0], [], ModelInputs(torch.tensor([[i]])), 1)


def _prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "shardwise-prefetch"]


class Tracker:
    """A producer that records how far ahead of the consumer it ran."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.produced = 0
        self.consumed = 0
        self.max_ahead = 0
        self.lock = threading.Lock()
        self.started = [threading.Event() for _ in range(n)]

    def batches(self) -> Iterator[Batch]:
        for i in range(self.n):
            self.started[i].set()
            with self.lock:
                self.produced += 1
                self.max_ahead = max(self.max_ahead, self.produced - self.consumed)
            yield _batch(i)


def test_next_batch_is_prepared_while_current_computes() -> None:
    tracker = Tracker(5)
    with Prefetcher(tracker.batches(), CPU, depth=2) as pf:
        for i, (batch, _) in enumerate(pf):
            assert batch.inputs is not None and int(batch.inputs.input_ids[0, 0]) == i
            if i + 1 < tracker.n:
                # "Computing" batch i: batch i+1 must get prepared meanwhile.
                assert tracker.started[i + 1].wait(5), f"batch {i + 1} was not prefetched during batch {i}"
            with tracker.lock:
                tracker.consumed += 1


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_look_ahead_is_bounded_by_depth(depth: int) -> None:
    tracker = Tracker(30)
    with Prefetcher(tracker.batches(), CPU, depth=depth) as pf:
        for _ in pf:
            threading.Event().wait(0.002)
            with tracker.lock:
                tracker.consumed += 1
    assert tracker.max_ahead <= depth
    assert tracker.produced == 30


def test_producer_error_reaches_consumer_and_thread_stops() -> None:
    def failing() -> Iterator[Batch]:
        yield _batch(0)
        raise ValueError("tokenizer exploded on row 1")

    seen = []
    with pytest.raises(ValueError, match="tokenizer exploded"), Prefetcher(failing(), CPU) as pf:
        for batch, _ in pf:
            seen.append(batch)
    assert len(seen) == 1
    assert not _prefetch_threads()


def test_early_exit_stops_thread_and_closes_source() -> None:
    closed = threading.Event()

    def endless() -> Iterator[Batch]:
        try:
            i = 0
            while True:
                yield _batch(i)
                i += 1
        finally:
            closed.set()

    pf = Prefetcher(endless(), CPU)
    with pf:
        for i, _ in enumerate(pf):
            if i == 3:
                break
    assert not pf.alive
    assert closed.is_set(), "the producer's source generator must be closed on its own thread"
    assert not _prefetch_threads()


def test_consumer_error_stops_thread() -> None:
    pf = Prefetcher((_batch(i) for i in range(100)), CPU)
    with pytest.raises(RuntimeError, match="forward failed"), pf:
        for _ in pf:
            raise RuntimeError("forward failed")
    assert not pf.alive


def test_wait_time_is_measured() -> None:
    def slow() -> Iterator[Batch]:
        for i in range(2):
            threading.Event().wait(0.05)
            yield _batch(i)

    with Prefetcher(slow(), CPU) as pf:
        waits = [w for _, w in pf]
    assert waits[0] >= 0.04


def test_depth_must_be_positive() -> None:
    with pytest.raises(ValueError, match="depth must be >= 1"):
        Prefetcher(iter([]), CPU, depth=0)
