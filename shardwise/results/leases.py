"""Leases: how the ledger tells a live run (or shard attempt) from one whose process died.

A process that runs a run (the flow's process) or scores a shard (a worker)
writes its ``owner`` (``host:pid/thread@pidns:start``, see
:mod:`~shardwise.results.owners`) and a lease expiry into the ledger row,
and renews the expiry while it works (see :mod:`shardwise.pipeline.lease`).
A killed run stays ``running`` in ``shardwise_runs``, so a run still
``running`` is shown as ``abandoned``, a state derived here and never
stored, once its lease expired, or at once when its owner is a process of
this host that is gone (:func:`~shardwise.results.owners.owner_gone`):
waiting out its lease would only delay the resume. Of an owner on another
host only the expiry tells a killed process from a slow one. A run recorded
before leases existed has no lease: it shows as ``running``, and nothing
refuses to resume it.

Expiry is compared with this host's clock, the clock of the process that
wrote it: hosts sharing a ledger must agree on the time to within a few
seconds (NTP), far below a lease's length.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Literal

from shardwise.results.owners import owner_gone

__all__ = [
    "LEASE_S",
    "MAX_LEASE_S",
    "MIN_LEASE_S",
    "RunState",
    "abandoned_why",
    "expiry",
    "lease_held",
    "lease_live",
    "run_state",
    "when",
]

LEASE_S = 60.0
"""Default seconds a lease lasts unless renewed; its holder renews it every quarter of that (15 s).

Long enough that a busy database or a stalled moment never lets a live run
look abandoned; short enough that a killed run shows as abandoned, and can be
resumed, a minute after it died.
"""
MIN_LEASE_S, MAX_LEASE_S = 2.0, 3600.0
"""The lease lengths a run may ask for: seconds (tests) to an hour (a database that stalls for minutes)."""

RunState = Literal["running", "completed", "failed", "stopped", "abandoned"]
"""A run's status as stored, or ``abandoned``: ``running`` with its lease expired; a listed run is
``stopped`` where it failed only because its budget stopped its shards (see
:meth:`~shardwise.results.outcomes.RunListing.state`)."""


def expiry(lease_s: float, now: datetime | None = None) -> datetime:
    """When a lease taken or renewed now for ``lease_s`` seconds runs out."""
    return (now or datetime.now(timezone.utc)) + timedelta(seconds=lease_s)


def lease_live(expires_at: datetime | None, now: datetime | None = None) -> bool:
    """Whether a lease expiring at ``expires_at`` is still held; no lease at all is not."""
    return expires_at is not None and expires_at > (now or datetime.now(timezone.utc))


def run_state(
    status: str, expires_at: datetime | None, now: datetime | None = None, owner: str | None = None
) -> RunState:
    """``abandoned`` for a ``running`` run whose lease expired, or whose ``owner`` is a process of this host
    that is gone; else the stored status."""
    if status != "running" or expires_at is None:
        return status  # type: ignore[return-value]
    if not lease_live(expires_at, now) or owner_gone(owner):
        return "abandoned"
    return "running"


def abandoned_why(owner: str | None, expires_at: datetime | None, now: datetime | None = None) -> str:
    """Why a run is abandoned, for a message: ``OWNER stopped renewing its lease, which expired ...``,
    or ``its process OWNER is gone (...)`` while its lease has yet to run out."""
    if lease_live(expires_at, now):
        return f"its process {owner} is gone (its lease would have run until {when(expires_at)})"
    return f"{owner} stopped renewing its lease, which expired {when(expires_at)}"


def when(moment: datetime | None) -> str:
    """A lease time as people read it: ``2024-05-01 12:00:03 UTC``."""
    return "never" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def lease_held(
    run_id: str, owner: str | None, expires_at: datetime | None, *, meanwhile: bool = False
) -> str:
    """The one-line refusal of a resume whose run another process holds, with both ways out."""
    held = f"was taken over meanwhile by {owner}" if meanwhile else f"is still running on {owner}"
    return (
        f"run {run_id!r} {held}: its lease runs until {when(expires_at)} and is renewed while that "
        f"process works. Wait for it to end (shardwise runs lists it), or take it over with --resume "
        f"{run_id} --force; shards it is scoring then run twice, and only one result of each is kept"
    )
