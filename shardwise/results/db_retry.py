"""Retry one database step on a new connection: the step that failed, not the shard.

A chunk's database step (stage its rows, merge them, write its mark) holds
everything it needs in memory, so a dropped connection, a terminated backend
or a lock timeout costs a new connection and that step again, never a second
scoring of the rows. Only :class:`~shardwise.errors.TransientError` is
retried; anything else is permanent and raised at once. Each retry is logged
with its try number; when the tries run out the last error is raised as a
:class:`TransientError`, so the task's own retry policy decides what follows.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from shardwise.errors import ConfigError, TransientError

__all__ = ["DbRetry", "retry_step"]

_log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class DbRetry:
    """``tries`` in all; before try n+1, wait ``backoff_s * 2**(n-1)``, at most ``max_backoff_s``, ± jitter.

    The defaults ride out a server restart of a few seconds (0.5 + 1 + 2 + 4 s
    of waiting over five tries) without holding a failed shard for long.
    """

    tries: int = 5
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    jitter: float = 0.25
    """A fraction of each wait, added or taken at random, so writers that failed together retry apart."""

    def __post_init__(self) -> None:
        if not isinstance(self.tries, int) or self.tries < 1:
            raise ConfigError(f"tries must be a positive integer (1: no retry); got {self.tries!r}")
        for name in ("backoff_s", "max_backoff_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"{name} must be a number of seconds >= 0; got {value!r}")
        if not isinstance(self.jitter, (int, float)) or not 0 <= self.jitter < 1:
            raise ConfigError(f"jitter must be a fraction in [0, 1); got {self.jitter!r}")

    def delay(self, failed: int) -> float:
        """Seconds to wait after ``failed`` failed tries."""
        base = min(self.backoff_s * 2 ** (failed - 1), self.max_backoff_s)
        return float(max(0.0, base * (1 + random.uniform(-self.jitter, self.jitter))))


def retry_step(
    step: Callable[[], T],
    *,
    what: str,
    policy: DbRetry,
    reset: Callable[[], None],
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``step``; after a :class:`TransientError`, call ``reset`` (drop the connection) and run it again.

    ``what`` names the step in the log lines and the final error, e.g.
    ``"commit chunk 3 of shard 2"``.
    """
    for attempt in range(1, policy.tries + 1):
        try:
            return step()
        except TransientError as exc:
            reset()
            if attempt == policy.tries:
                raise TransientError(
                    f"{what} failed on all {policy.tries} tries, each on a new connection; "
                    f"the last error: {exc}"
                ) from exc
            wait = policy.delay(attempt)
            _log.warning(
                "%s failed on try %d of %d: %s; trying again on a new connection in %.2f s",
                what, attempt, policy.tries, exc, wait,
            )  # fmt: skip
            sleep(wait)
    raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover
