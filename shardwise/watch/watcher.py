"""What every watcher shares: announce changes, poll once, loop until stopped, close.

:class:`~shardwise.watch.poller.WatermarkPoller`,
:class:`~shardwise.watch.pg_notify.PgNotifyWatcher` and
:class:`~shardwise.watch.object_watcher.ObjectWatcher` differ in how they
notice new data (:meth:`Watcher.poll_once`); the loop that calls it, backs
off after transient errors and stops when asked is this one.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Callable

from shardwise.closing import Closing
from shardwise.watch.events import Announcer, Emitter
from shardwise.watch.loop import Backoff, run_until

__all__ = ["Seen", "Watcher"]

Seen = Callable[[], frozenset[tuple[str, str]]]
"""Returns the (object key, ETag) pairs the ledger has already scored: what a watcher of files leaves
unannounced."""


class Watcher(Closing):
    """Announces new data as ``shardwise.data.landed`` events under ``name``. Not thread-safe.

    :meth:`run` calls :meth:`poll_once` every ``pause_s`` seconds until
    ``stop`` is set, waiting longer after transient errors (``backoff``).
    """

    def __init__(self, name: str, emit: Emitter, *, pause_s: float, backoff: Backoff | None) -> None:
        self._announce = Announcer(name, emit)
        self._pause_s = pause_s
        self._backoff = backoff or Backoff()

    @property
    @abstractmethod
    def watching(self) -> str:
        """What is watched, for log lines: a table's or a location's identity."""

    @abstractmethod
    def poll_once(self) -> int:
        """Look once and announce what is new; returns the events emitted."""

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set, backing off after transient errors."""
        what = f"watcher {self._announce.name!r} of {self.watching}"
        run_until(stop, self.poll_once, pause_s=self._pause_s, backoff=self._backoff, what=what)

    @abstractmethod
    def close(self) -> None:
        """Release what the watcher holds (connections, clients)."""
