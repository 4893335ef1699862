"""Holding a lease while working, and the one rule for resuming a run someone may still hold.

A run's lease is held by the process that planned it (the flow's process)
from :func:`~shardwise.pipeline.prepare_run` until :func:`finish_run`; a
shard attempt's by the worker scoring it. Each renews its lease from a
:class:`LeaseKeeper` daemon thread every quarter of the lease's length (15 s
for the default 60 s, :data:`~shardwise.results.leases.LEASE_S`), so a
process that dies stops renewing, and a minute later its run shows as
``abandoned`` and may be resumed.

:func:`takeover_from` is the rule a resume follows, checked early by
:func:`~shardwise.pipeline.check_run` and enforced atomically by the ledger
(:meth:`~shardwise.results.Ledger.start_run`): a live lease refuses the
resume unless it is forced, or unless its owner is a process of this host
that is gone (:func:`~shardwise.results.owners.owner_gone`: a run killed
here resumes at once, without ``--force``); a forced resume, or one from a
gone owner, takes the run only from the owner it saw.

Workers do not check the leases of shard attempts: a resumed run's worker
takes a new attempt at every shard not done whoever held the last one, and
the chunk writer commits each chunk once whichever attempt gets there first
(see :mod:`~shardwise.results.chunk_writer`). Their leases only tell
``shardwise runs`` how many shards are being scored.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType

from shardwise.errors import ConfigError
from shardwise.results import Ledger, RunSummary
from shardwise.results.leases import LEASE_S, RunState, lease_held, lease_live, when
from shardwise.results.owners import owner_gone

__all__ = [
    "LEASE_S",
    "LeaseKeeper",
    "Takeover",
    "renew_every",
    "run_lease_keeper",
    "shard_lease_keeper",
    "takeover_from",
]

_log = logging.getLogger(__name__)


def renew_every(lease_s: float) -> float:
    """Seconds between renewals of a ``lease_s`` lease: a quarter, so three renewals may fail in a row."""
    return lease_s / 4


@dataclass(frozen=True)
class Takeover:
    """Whom a resume took the run from: the owner, its lease expiry then, and the run's state then."""

    owner: str | None
    expires_at: datetime | None
    state: RunState
    forced: bool = False
    """Whether its lease was live, held by another process, and taken by force."""
    gone: bool = False
    """Whether its lease was live but held by a process of this host that is gone, so taken without force."""

    def describe(self) -> str:
        """``abandoned by host:12/0 (lease expired 2024-05-01 12:00:03 UTC)`` and the like."""
        if self.owner is None:
            return f"{self.state}, without a lease (recorded before leases)"
        if self.forced:
            return f"taken over from {self.owner} by force (its lease ran until {when(self.expires_at)})"
        if self.gone:
            until = when(self.expires_at)
            return f"abandoned by {self.owner}, a process of this host now gone (its lease ran until {until})"
        if self.state == "running":
            return f"running, held by this process ({self.owner})"
        if self.state == "abandoned":
            return f"abandoned by {self.owner} (lease expired {when(self.expires_at)})"
        return f"{self.state} (last held by {self.owner}, lease released {when(self.expires_at)})"


def takeover_from(
    summary: RunSummary, *, force: bool, owner: str | None = None, now: datetime | None = None
) -> Takeover:
    """What resuming the run of ``summary`` takes over; a :class:`ConfigError` when its lease is live.

    A live lease refuses the resume unless ``force``, unless ``owner`` (the
    resuming process, when known) holds it already, or unless its holder is
    a process of this host that is gone (pid and start time checked, see
    :mod:`~shardwise.results.owners`). Taken by force or from a gone holder,
    it is taken from the owner seen here, and only from that one: the
    ledger's conditional update refuses if another resumer took it meanwhile.
    """
    live = summary.status == "running" and lease_live(summary.lease_expires_at, now)
    held_elsewhere = live and (owner is None or summary.owner != owner)
    gone = held_elsewhere and owner_gone(summary.owner)
    if held_elsewhere and not gone and not force:
        raise ConfigError(lease_held(summary.record.run_id, summary.owner, summary.lease_expires_at))
    forced = held_elsewhere and not gone
    return Takeover(summary.owner, summary.lease_expires_at, summary.state(now), forced, gone)


class LeaseKeeper:
    """Calls ``renew`` every ``every_s`` seconds from a daemon thread, from :meth:`start` to :meth:`stop`.

    ``renew`` returns whether the lease is still held; once it says False
    (another process took it over) the keeper stops and :attr:`lost` is set.
    A failed renewal (a busy or unreachable database) is tried again at the
    next tick; it is logged at debug level, or as a warning once the lease
    may have run out meanwhile, so others may now see it as abandoned.
    """

    def __init__(self, renew: Callable[[], bool], every_s: float, what: str, lease_s: float) -> None:
        if every_s <= 0:
            raise ValueError(f"every_s must be positive seconds between renewals; got {every_s!r}")
        self._renew, self._every_s, self._what, self._lease_s = renew, every_s, what, lease_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"shardwise-lease-{what}", daemon=True)
        self._renewed = time.monotonic()
        self.lost = False

    def start(self) -> LeaseKeeper:
        self._renewed = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing, and wait for a renewal in flight so none lands after the caller's next write."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10 * self._every_s)

    def __enter__(self) -> LeaseKeeper:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                held = self._renew()
            except Exception as exc:  # renewing must never fail the work it guards
                stale = time.monotonic() - self._renewed >= self._lease_s
                _log.log(
                    logging.WARNING if stale else logging.DEBUG,
                    "renewing the lease of %s failed: %s%s",
                    self._what,
                    exc,
                    "; it may have expired, so it may show as abandoned" if stale else "",
                )
                continue
            if held:
                self._renewed = time.monotonic()
                continue
            if not self._stop.is_set():
                self.lost = True
                _log.warning("the lease of %s is held by another process now; no longer renewed", self._what)
            return


def run_lease_keeper(ledger: Ledger, run_id: str, owner: str, lease_s: float) -> LeaseKeeper:
    """The keeper of ``owner``'s lease on run ``run_id`` (not started yet)."""

    def renew() -> bool:
        return ledger.renew_run_lease(run_id, owner, lease_s)

    return LeaseKeeper(renew, renew_every(lease_s), f"run-{run_id}", lease_s)


def shard_lease_keeper(
    ledger: Ledger, run_id: str, shard_id: int, attempt: int, owner: str, lease_s: float
) -> LeaseKeeper:
    """The keeper of a worker's lease on its attempt at a shard (not started yet)."""

    def renew() -> bool:
        return ledger.renew_shard_lease(run_id, shard_id, attempt, owner, lease_s)

    return LeaseKeeper(renew, renew_every(lease_s), f"shard-{shard_id}", lease_s)
