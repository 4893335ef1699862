"""The run loop every watcher shares: step, pause, and back off while errors are transient.

A :class:`~shardwise.errors.TransientError` (a dropped connection, a database
restarting, S3 throttling) is logged and retried after an exponentially
growing pause, reset by the next step that succeeds. Any other error is
permanent (a dropped table, a bad setting) and ends the loop: retrying
cannot fix it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from shardwise.errors import ConfigError, TransientError

__all__ = ["Backoff", "run_until"]

_log = logging.getLogger(__name__)


@dataclass
class Backoff:
    """Pauses of ``first_s``, doubling up to ``max_s``, between failed attempts."""

    first_s: float = 0.5
    max_s: float = 30.0
    _next_s: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.first_s <= self.max_s:
            raise ConfigError(
                f"backoff needs 0 < first_s <= max_s; got first_s={self.first_s!r}, max_s={self.max_s!r}"
            )
        self._next_s = self.first_s

    def next(self) -> float:
        """The pause before the next attempt; each call doubles the one after."""
        wait, self._next_s = self._next_s, min(self.max_s, self._next_s * 2)
        return wait

    def reset(self) -> None:
        self._next_s = self.first_s


def run_until(
    stop: threading.Event, step: Callable[[], object], *, pause_s: float, backoff: Backoff, what: str
) -> None:
    """Call ``step`` until ``stop`` is set, ``pause_s`` apart, backing off after transient errors."""
    while not stop.is_set():
        try:
            step()
        except TransientError as exc:
            wait = backoff.next()
            _log.warning("%s: %s; trying again in %.1f s", what, exc, wait)
        else:
            backoff.reset()
            wait = pause_s
        if wait > 0:
            stop.wait(wait)
