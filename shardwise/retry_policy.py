"""One retry policy for every layer of a run, and the one deadline a shard's retries share.

Before this module each layer retried on its own: the chunk writer's steps,
S3 reads, the Prefect task. Their product decided how long an outage a shard
survived, and nobody could say the number. Now a run has one
:class:`RetryPolicy` (recorded in its plan, so every worker uses the same
one), and each shard one :class:`Outage`: the clock the deadline runs on,
shared by every layer that retries for that shard.

The rule, which the docs quote as one number::

    a shard survives any outage shorter than deadline_s (default 120 s)

* The clock starts at the shard's first failure (a :class:`TransientError`)
  after its last success, and stops when a step succeeds again: each outage
  gets the whole deadline; a shard that recovers starts afresh.
* A failed step is tried again after ``backoff_s``, doubling up to
  ``backoff_cap_s``, each wait ± ``jitter`` (so workers that failed together
  retry apart), and the last wait is cut to end at the deadline, so one try
  always lands on it: an outage over by then is ridden out.
* A step that still fails past the deadline raises
  :class:`~shardwise.errors.RetryDeadlineError`, which is not transient:
  nothing above it retries, and the shard fails with that one reason.
* A transient failure that no step retries (a source's stream cut mid-read,
  a device out of memory on one row) goes up to the shard's next attempt,
  at most ``attempts`` in all; the attempts share the clock, so they do not
  multiply the deadline either.

A try that hangs is bounded by its layer's own timeouts (PostgreSQL's
``connect_timeout``, S3's connect and read timeouts), so a shard fails at
most one such timeout after its deadline. A statement of the ledger or a SQL
sink on PostgreSQL is bounded by ``db_timeout_s`` (the server's
``statement_timeout`` and ``lock_timeout``), and a connection whose server
stops answering by a little more (:mod:`shardwise.db.timeouts`): a hung
connection fails its try, which is retried on a new connection.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from shardwise.errors import ConfigError, RetryDeadlineError, TransientError

__all__ = [
    "DEFAULT_DB_TIMEOUT_S",
    "DEFAULT_RETRY_DEADLINE_S",
    "MAX_ATTEMPTS",
    "Outage",
    "RetryPolicy",
    "retry_step",
]

T = TypeVar("T")
_log = logging.getLogger(__name__)

DEFAULT_RETRY_DEADLINE_S = 120.0
"""How long an outage a shard survives by default: a PostgreSQL restart or a managed database's
failover (typically under a minute or two), an S3 brownout. Longer fails the shard; ``--resume``
finishes it."""

DEFAULT_DB_TIMEOUT_S = 60.0
"""A minute: far longer than any one statement of the ledger or a SQL sink takes (a chunk's merge takes
seconds), and short enough that a hung connection is replaced well within the default retry deadline."""

MAX_ATTEMPTS = 50
"""The most attempts a shard may be given: more would only hide a failure that is not passing."""


@dataclass(frozen=True)
class RetryPolicy:
    """How every layer of a run retries a transient failure; see the module docstring for the rule."""

    deadline_s: float = DEFAULT_RETRY_DEADLINE_S
    """Seconds a shard keeps retrying one outage, whichever layers meet it; 0 retries nothing."""
    attempts: int = 4
    """A shard's attempts in all (the Prefect task's tries), for failures no step retries."""
    backoff_s: float = 0.5
    """The first wait after a failure; it doubles with each further failure of the same outage."""
    backoff_cap_s: float = 8.0
    """The longest wait between two tries."""
    jitter: float = 0.25
    """A fraction of each wait added or taken at random, so workers that failed together retry apart."""
    db_timeout_s: float = DEFAULT_DB_TIMEOUT_S
    """Seconds one statement of the ledger or a SQL sink on PostgreSQL may run or wait for a lock before
    its try fails (transient, so it is tried again); a connection whose server stops answering is given
    up a little later (:mod:`shardwise.db.timeouts`). 0: no bounds."""

    def __post_init__(self) -> None:
        for name in ("deadline_s", "backoff_s", "backoff_cap_s", "db_timeout_s"):
            if not _number(getattr(self, name), float("inf")):
                raise ConfigError(
                    f"retry {name} must be a number of seconds >= 0; got {getattr(self, name)!r}"
                )
        if type(self.attempts) is not int or not 1 <= self.attempts <= MAX_ATTEMPTS:
            raise ConfigError(
                f"retry attempts must be a whole number from 1 (no second attempt) to {MAX_ATTEMPTS}; "
                f"got {self.attempts!r}"
            )
        if not _number(self.jitter, 1):
            raise ConfigError(f"retry jitter must be a fraction in [0, 1); got {self.jitter!r}")

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure of an outage, jittered."""
        base = min(self.backoff_s * 2 ** max(failures - 1, 0), self.backoff_cap_s)
        return float(max(0.0, base * (1 + random.uniform(-self.jitter, self.jitter))))

    def task_delays(self) -> list[float]:
        """The waits before a shard's second, third, ... attempt, unjittered (the task layer jitters)."""
        return [min(self.backoff_s * 2**n, self.backoff_cap_s) for n in range(self.attempts - 1)]

    def to_params(self) -> dict[str, float | int]:
        """Plain data for the run's stored plan."""
        return asdict(self)

    @classmethod
    def from_params(cls, stored: Mapping[str, Any] | None, default: RetryPolicy | None = None) -> RetryPolicy:
        """The policy a plan recorded; ``default`` (else the defaults) for a plan recorded before policies."""
        if not stored:
            return default or cls()
        return cls(**{name: stored[name] for name in cls.__dataclass_fields__ if name in stored})


def _number(value: object, below: float) -> bool:
    """A real number (not a bool) in ``[0, below)``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < below


class Outage:
    """One shard's clock: when its current outage began, shared by every layer that retries for it.

    Thread-safe: a shard's steps run in one thread, but it may fetch in a pool.
    ``clock`` is for tests; it defaults to :func:`time.monotonic`.
    """

    def __init__(self, policy: RetryPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self._began: float | None = None
        self._failures = 0

    def failed(self) -> tuple[int, float]:
        """Count a failure; how many this outage has had, and the seconds since it began."""
        with self._lock:
            now = self._clock()
            if self._began is None:
                self._began = now
            self._failures += 1
            return self._failures, now - self._began

    def recovered(self) -> None:
        """A step succeeded: the outage, if any, is over."""
        with self._lock:
            self._began, self._failures = None, 0

    def elapsed(self) -> float:
        """Seconds since the current outage began (0 when there is none)."""
        with self._lock:
            return 0.0 if self._began is None else self._clock() - self._began

    def past_deadline(self) -> bool:
        with self._lock:
            return self._began is not None and self._clock() - self._began >= self.policy.deadline_s

    def give_up(self, what: str, exc: BaseException) -> RetryDeadlineError:
        """The one error a shard fails with once its deadline passed, naming the deadline."""
        return RetryDeadlineError(
            f"{what} kept failing for {self.elapsed():.1f} s, past the retry deadline of "
            f"{self.policy.deadline_s:g} s, so the shard gave up; the last error: {exc}. Once the database "
            "or store is back, --resume RUN_ID finishes the run; for new runs to ride out longer outages, "
            "raise --retry-deadline"
        )


def retry_step(
    step: Callable[[], T],
    *,
    what: str,
    outage: Outage,
    reset: Callable[[], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    log: logging.Logger = _log,
) -> T:
    """``step()``, tried again after each :class:`TransientError` until ``outage``'s deadline passes.

    ``what`` names the step in the log lines and the final error (``commit chunk 3
    of shard 2``); ``reset`` runs after each failure (drop a connection). Each
    retry is logged with its try number. Anything not transient is raised at
    once; past the deadline, :meth:`Outage.give_up`'s error is.
    """
    tries = 0
    while True:
        tries += 1
        try:
            result = step()
        except TransientError as exc:
            if reset is not None:
                reset()
            failures, elapsed = outage.failed()
            left = outage.policy.deadline_s - elapsed
            if left <= 0:
                raise outage.give_up(what, exc) from exc
            wait = min(outage.policy.delay(failures), left)
            log.warning(
                "%s failed on try %d (%.1f s into the outage, given up %g s in): %s; trying again in %.2f s",
                what, tries, elapsed, outage.policy.deadline_s, exc, wait,
            )  # fmt: skip
            sleep(wait)
            continue
        outage.recovered()
        return result
