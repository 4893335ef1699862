"""Fetch image values a few rows ahead on a few threads, hand them on in row order, and never hang on one.

Both image readers (a source's image column, an image folder) read this way:
up to ``threads * 4`` rows ahead of the row being handed on, so reading stays
ahead of the device while memory stays bounded, and rows come out in the
order they went in (a source's row order, and so a resumed shard's
``ReadFrom``, does not change).

The threads are daemon threads: a read stuck in the kernel (a hung network
mount) can hold its thread, never the process, so a signal still ends a run
at once. A local read that runs past its ``limit_s`` is given up: its row
becomes a dead letter saying so, and a new thread takes the stuck one's place.
If more reads hang than there are threads, the storage is not answering, and
the read fails with a :class:`~shardwise.errors.SourceError` (the shard
fails; ``--resume`` reads it again once the storage is back). S3 reads have no
``limit_s`` here: botocore's timeouts and the run's retry deadline bound them.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from queue import Empty, SimpleQueue
from typing import TypeVar

from shardwise.errors import SourceError
from shardwise.model.binary_value import BinaryValue

__all__ = ["Fetch", "fetched_in_order"]

K = TypeVar("K")
_AHEAD_PER_THREAD = 4
_POLL_S = 0.25


@dataclass
class Fetch:
    """One row's fetch: ``call`` gives its value; a run past ``limit_s`` seconds is given up (None: never)."""

    call: Callable[[], BinaryValue]
    origin: str
    limit_s: float | None
    future: Future[BinaryValue] = field(default_factory=Future)
    started: float | None = None

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return  # cancelled: the reader closed before it started
        self.started = time.monotonic()
        try:
            self.future.set_result(self.call())
        except BaseException as exc:  # handed to the reader, which raises it in the shard
            self.future.set_exception(exc)


class _Pool:
    """Daemon threads taking fetches from one queue; only the reader's thread calls its methods."""

    def __init__(self, threads: int, name: str) -> None:
        self._queue: SimpleQueue[Fetch | None] = SimpleQueue()
        self._size, self._name = threads, name
        self._threads = 0
        self._numbers = itertools.count()
        self._lost = 0

    def submit(self, fetch: Fetch) -> None:
        self._queue.put(fetch)
        if self._threads < self._size:
            self._start()

    def result(self, fetch: Fetch) -> BinaryValue:
        """The fetch's value, waiting for it, or a refusal once it has run past its limit."""
        while True:
            try:
                return fetch.future.result(timeout=_POLL_S)
            except FutureTimeout:
                limit, started = fetch.limit_s, fetch.started
                if limit is not None and started is not None and time.monotonic() - started > limit:
                    return self._give_up(fetch, limit)

    def close(self) -> None:
        """Cancel the fetches not started and let every thread end; a stuck one ends when its read does."""
        while True:
            try:
                waiting = self._queue.get_nowait()
            except Empty:
                break
            if waiting is not None:
                waiting.future.cancel()
        for _ in range(self._threads):
            self._queue.put(None)

    def _give_up(self, fetch: Fetch, limit: float) -> BinaryValue:
        self._lost += 1
        if self._lost > self._size:
            raise SourceError(
                f"{self._lost} image reads hung for over {limit:g} s each (the last {fetch.origin}); the "
                "storage they are on is not answering: check it, then resume the run"
            )
        self._threads -= 1  # the stuck thread is left to its read; another takes its place
        self._start()
        return BinaryValue(
            None,
            origin=fetch.origin,
            error=f"refused: reading it hung for over {limit:g} s, so it was given up; check the storage it "
            "is on, then redrive the run",
        )

    def _start(self) -> None:
        name = f"{self._name}-{next(self._numbers)}"
        threading.Thread(target=self._work, name=name, daemon=True).start()
        self._threads += 1

    def _work(self) -> None:
        while (fetch := self._queue.get()) is not None:
            fetch.run()


def fetched_in_order(
    items: Iterable[tuple[K, Fetch | BinaryValue]], *, threads: int, name: str
) -> Generator[tuple[K, BinaryValue], None, None]:
    """Each item's key and value, in order: a :class:`Fetch` run on the pool, a value as it is.

    Closing the generator cancels the fetches not yet started.
    """
    pool = _Pool(threads, name)
    pending: deque[tuple[K, Fetch | BinaryValue]] = deque()

    def done(entry: tuple[K, Fetch | BinaryValue]) -> tuple[K, BinaryValue]:
        key, item = entry
        return key, (pool.result(item) if isinstance(item, Fetch) else item)

    try:
        for key, item in items:
            if isinstance(item, Fetch):
                pool.submit(item)
            pending.append((key, item))
            if len(pending) >= threads * _AHEAD_PER_THREAD:
                yield done(pending.popleft())
        while pending:
            yield done(pending.popleft())
    finally:
        pool.close()
