"""Wait out a short outage for the writes that record what happened.

A shard's outcome must reach the ledger even when the database was down at
the moment the shard failed: otherwise the run says ``failed`` with no failed
shard and no error to show. :func:`until_back` retries such a write, on
:class:`~shardwise.errors.TransientError` only, with doubling pauses, for a
bounded time; then the last error propagates.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from shardwise.errors import TransientError
from shardwise.retry_policy import RetryPolicy

__all__ = ["RECORD_WAIT_S", "record_wait_s", "until_back"]

T = TypeVar("T")

RECORD_WAIT_S = 120.0
"""How long a write that records an outcome waits for its database to come back, at least."""


def record_wait_s(policy: RetryPolicy) -> float:
    """How long a run records an outcome for: :data:`RECORD_WAIT_S`, or the run's retry deadline if longer
    (a shard that gave up at its deadline met an outage that long, which may not be over)."""
    return max(RECORD_WAIT_S, policy.deadline_s)


def until_back(
    action: Callable[[], T],
    *,
    what: str,
    log: Callable[[str], None],
    wait_s: float = RECORD_WAIT_S,
    first_pause_s: float = 1.0,
    longest_pause_s: float = 10.0,
) -> T:
    """``action()``, tried again after each transient failure until ``wait_s`` has passed.

    Each retry is logged with its attempt number and the error, through ``log``.
    """
    deadline, pause, attempt = time.monotonic() + wait_s, first_pause_s, 1
    while True:
        try:
            return action()
        except TransientError as exc:
            if time.monotonic() + pause > deadline:
                raise
            log(f"{what}: attempt {attempt} failed ({exc}); trying again in {pause:.0f} s")
        time.sleep(pause)
        pause, attempt = min(pause * 2, longest_pause_s), attempt + 1
