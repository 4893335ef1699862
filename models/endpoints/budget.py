"""Requests and tokens per minute, shared by every worker process of one host.

The arithmetic is pyrate-limiter's GCRA (a leaky bucket kept as one
theoretical-arrival time per rate): a budget of N per minute admits one unit
every 60/N seconds, with a burst of one second's worth (at least one unit), so
requests are spread over the minute: no 30-second window sees more than half
the budget plus that second. A request dearer than the burst (a tokens budget)
is charged in pieces of one burst each, so it waits for its tokens to drip in
rather than for a whole minute's worth at once. Its state, a few integers, lives in a
SQLite file (:class:`SqliteStateStore`), so every worker process of a host that
calls the same endpoint with the same key draws from one budget: the file's
name hashes the endpoint, the model and the key's *reference* (never the key).
SQLite's own write lock (``BEGIN IMMEDIATE``) makes each read-step-write
atomic across processes, so no lock file is needed.

Several hosts each keep their own file: give each host its share of the
provider's limit (``--requests-per-minute`` divided by the hosts).

A request's tokens are estimated before it is sent (prompt characters / 4,
plus the completion's cap, which is what providers count against a budget)
and corrected from the usage the response reports: tokens used beyond the
estimate are a debt added to the next request's weight; an over-estimate is
not handed back (the budget errs on the side of fewer requests). A server's
own ``x-ratelimit-*`` headers pause new requests until its stated reset when
it says a budget is spent (:meth:`Budgets.heed`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import tempfile
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from pyrate_limiter import GCRA, Duration, Limiter, Rate, StateBucket, StateStore, WallClock

__all__ = ["Budgets", "SqliteStateStore", "budget_file", "burst", "reset_seconds"]

_ESTIMATE_CHARS_PER_TOKEN = 4
_BURST_S = 1
"""How many seconds' worth of a budget may go at once (rounded up to one unit)."""


class SqliteStateStore(StateStore):
    """One budget's GCRA state in a SQLite file, read, stepped and written in one IMMEDIATE transaction."""

    is_async = False
    default_clock = WallClock()  # the state is compared across processes: a shared clock

    def __init__(self, path: Path, key: str) -> None:
        self.path, self.key = path, key
        self._local = threading.local()
        with self._connection() as db:
            db.execute("CREATE TABLE IF NOT EXISTS budget (key TEXT PRIMARY KEY, state TEXT NOT NULL)")

    def _connection(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:  # one connection per thread: sqlite3 connections are not shared between threads
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            self._local.db = db
        return db

    def check(self, algorithm: Any, rates: list[Rate], now: int, weight: int) -> Any:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")  # the write lock first: no other process steps between read and write
        try:
            state = self._load(db, algorithm, rates)
            new_state, decision = algorithm.step(rates, state, now, weight)
            if decision.allowed:
                db.execute(
                    "INSERT OR REPLACE INTO budget (key, state) VALUES (?, ?)",
                    (self.key, json.dumps(new_state)),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return decision

    def read(self, algorithm: Any, rates: list[Rate]) -> Any:
        return self._load(self._connection(), algorithm, rates)

    def reset(self) -> None:
        self._connection().execute("DELETE FROM budget WHERE key = ?", (self.key,))

    def _load(self, db: sqlite3.Connection, algorithm: Any, rates: list[Rate]) -> Any:
        row = db.execute("SELECT state FROM budget WHERE key = ?", (self.key,)).fetchone()
        stored = tuple(json.loads(row[0])) if row else ()
        return stored if len(stored) == len(rates) else algorithm.initial(rates)


def budget_file(identity: str, folder: Path | None = None) -> Path:
    """The SQLite file holding the budgets of ``identity`` (endpoint, model, key reference) on this host."""
    where = folder or Path(tempfile.gettempdir()) / "shardwise-budgets"
    where.mkdir(parents=True, exist_ok=True)
    return where / f"{hashlib.sha256(identity.encode()).hexdigest()[:24]}.sqlite"


class Budgets:
    """The requests- and tokens-per-minute budgets of one endpoint, and the pause its headers ask for.

    Used from one event loop; ``acquire`` waits (asynchronously) until both
    budgets admit the request and any pause a server asked for is over.
    """

    def __init__(
        self,
        identity: str,
        requests_per_minute: int | None,
        tokens_per_minute: int | None,
        folder: Path | None,
    ) -> None:
        self._requests = _limiter(identity, "requests", requests_per_minute, folder)
        self._tokens = _limiter(identity, "tokens", tokens_per_minute, folder)
        self._token_cap = tokens_per_minute or 1
        self._debt = 0
        self._paused_until = 0.0

    async def acquire(self, estimate: int) -> int:
        """Wait for room for one request of ``estimate`` tokens; the weight charged (debt included)."""
        while (left := self._paused_until - time.monotonic()) > 0:
            await asyncio.sleep(left)
        if self._requests is not None:
            await self._requests.try_acquire_async("requests", 1)
        weight = estimate + self._debt
        self._debt = 0
        if self._tokens is not None:
            # A request dearer than the whole budget would wait past a minute: it takes all of it.
            await _take(self._tokens, "tokens", max(1, min(weight, self._token_cap)), burst(self._token_cap))
        return weight

    def settle(self, charged: int, used: int | None) -> None:
        """Correct the token budget once a response says how many tokens it used."""
        if used is not None and used > charged:
            self._debt += used - charged

    def heed(self, headers: Mapping[str, str]) -> None:
        """Pause new requests until the reset a server's rate-limit headers give, when a budget is spent."""
        wait = 0.0
        for kind in ("requests", "tokens"):
            remaining = _header(
                headers, f"x-ratelimit-remaining-{kind}", f"anthropic-ratelimit-{kind}-remaining"
            )
            if remaining is not None and remaining.strip() in ("0", "0.0"):
                reset = _header(headers, f"x-ratelimit-reset-{kind}", f"anthropic-ratelimit-{kind}-reset")
                wait = max(wait, reset_seconds(reset) if reset else 1.0)
        if wait > 0:
            self._paused_until = max(self._paused_until, time.monotonic() + min(wait, 60.0))

    def pause(self, seconds: float) -> None:
        """Hold every new request back ``seconds`` (a 429's Retry-After concerns the whole endpoint)."""
        self._paused_until = max(self._paused_until, time.monotonic() + seconds)


def _limiter(identity: str, kind: str, per_minute: int | None, folder: Path | None) -> Limiter | None:
    if per_minute is None:
        return None
    allowed = burst(per_minute)
    store = SqliteStateStore(budget_file(identity, folder), f"{kind}/{per_minute}/{allowed}")
    rate = Rate(per_minute, Duration.MINUTE, burst=allowed)
    bucket = StateBucket([rate], GCRA(), store=store, clock=WallClock())
    return Limiter(bucket, buffer_ms=5)


def burst(per_minute: int) -> int:
    """The most units of a ``per_minute`` budget that may go at once: one second's worth, at least one."""
    return max(1, -(-per_minute * _BURST_S // 60))


async def _take(limiter: Limiter, name: str, weight: int, piece: int) -> None:
    """Wait for ``weight`` units, in pieces of at most one burst (GCRA never admits more at once)."""
    while weight > 0:
        await limiter.try_acquire_async(name, min(weight, piece))
        weight -= piece


def _header(headers: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = headers.get(name)
        if value is not None:
            return value
    return None


def reset_seconds(text: str) -> float:
    """Seconds until a rate-limit reset as servers write it: ``1s``, ``6m0s``, ``120ms``, a number of
    seconds, or an RFC 3339 time (Anthropic's); 1 s when it cannot be read."""
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    total, number, matched = 0.0, "", False
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = "ms" if text[i : i + 2] == "ms" else ch
        if unit not in units or not number:
            break
        total += float(number) * units[unit]
        number, matched = "", True
        i += len(unit)
    else:
        if matched and not number:
            return total
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
        return max(0.0, at.timestamp() - time.time())
    except ValueError:
        return 1.0
