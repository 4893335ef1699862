"""Keep the next batch ready while the current one computes.

A background thread runs the producer (prepare, sort, collate) and, on CUDA,
stages each batch in pinned memory and copies it to the device on a side
stream. The consumer only waits when the producer has fallen behind, and the
time it waits is measured, so a starved device shows up in the stats.

Depth 2 is double buffering: one batch computes while one more is prepared.
A batch's slot is given back when the consumer asks for the batch after it,
so at most ``depth`` batches are ever alive on the device.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Iterator

import torch

from shardwise.batch.windows import Batch
from shardwise.closing import Closing

__all__ = ["Prefetcher"]

_POLL_S = 0.05


class _End:
    pass


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Prefetcher(Closing):
    """Iterate ``(batch, wait_seconds)`` with the next batch prepared in the background.

    Use it as a context manager (or call :meth:`close`): leaving early, or an
    error on either side, stops and joins the thread. An exception raised by
    the producer is re-raised in the consumer, with its traceback.
    """

    def __init__(self, batches: Iterable[Batch], device: torch.device, depth: int = 2) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._source = iter(batches)
        self._device = device
        self._cuda = device.type == "cuda"
        # CUDA's current device is per thread, so the producer thread sets its own; set_device needs
        # an index, and a bare "cuda" (what resolve_device("auto") gives) means this thread's current one.
        self._index = -1
        if self._cuda:
            self._index = device.index if device.index is not None else torch.cuda.current_device()
        self._stream = torch.cuda.Stream(device) if self._cuda else None  # type: ignore[no-untyped-call]
        self._slots = threading.Semaphore(depth)
        self._queue: queue.Queue[Batch | _End | _Failure] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="shardwise-prefetch", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def __iter__(self) -> Iterator[tuple[Batch, float]]:
        held = False
        while True:
            if held:
                # The previous batch has been computed (its outputs were copied
                # back to the host), so its slot can take the next batch.
                self._slots.release()
                held = False
            started = time.perf_counter()
            item = self._next_item()
            waited = time.perf_counter() - started
            if isinstance(item, _End):
                return
            if isinstance(item, _Failure):
                raise item.exc
            held = True
            self._adopt(item)
            yield item, waited

    def close(self) -> None:
        """Stop the producer, drop prepared batches and join the thread. Safe to call twice."""
        self._stop.set()
        while self._thread.is_alive():
            self._drain()
            self._thread.join(_POLL_S)
        self._drain()

    def _next_item(self) -> Batch | _End | _Failure:
        while True:
            try:
                return self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    return _Failure(RuntimeError("prefetch thread stopped without a result"))

    def _drain(self) -> None:
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass

    def _produce(self) -> None:
        if self._cuda:
            torch.cuda.set_device(self._index)
        try:
            while True:
                if not self._acquire_slot():
                    return
                try:
                    batch = next(self._source)
                except StopIteration:
                    self._queue.put(_End())
                    return
                self._queue.put(self._stage(batch))
        except BaseException as exc:  # handed to the consumer, which re-raises it
            self._queue.put(_Failure(exc))
        finally:
            # Close the producer chain here, on the thread that ran it, so a
            # database cursor or file it holds is released by its own thread.
            close = getattr(self._source, "close", None)
            if close is not None:
                close()

    def _acquire_slot(self) -> bool:
        while not self._slots.acquire(timeout=_POLL_S):
            if self._stop.is_set():
                return False
        return not self._stop.is_set()

    def _stage(self, batch: Batch) -> Batch:
        """On CUDA, pin the batch and start its copy to the device on the side stream."""
        if self._stream is None or batch.inputs is None:
            return batch
        host = batch.inputs.pin_memory()  # page-locked, or the copy below would not be asynchronous
        with torch.cuda.stream(self._stream):
            batch.inputs = host.to(self._device, non_blocking=True)
            ready = torch.cuda.Event()  # type: ignore[no-untyped-call]
            ready.record(self._stream)
        batch.ready, batch.host = ready, host
        return batch

    def _adopt(self, batch: Batch) -> None:
        """On CUDA, make the compute stream wait for the batch's copy, and own its memory."""
        if batch.ready is None or batch.inputs is None:
            return
        compute = torch.cuda.current_stream(self._device)
        compute.wait_event(batch.ready)
        for tensor in batch.inputs.tensors():
            # Allocated on the side stream but used on the compute stream:
            # without this the allocator could hand the memory to the next
            # copy while the forward pass still reads it.
            tensor.record_stream(compute)
