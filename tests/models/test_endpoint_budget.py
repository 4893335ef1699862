"""Requests- and tokens-per-minute budgets: shared by the processes of a host, paced, and told by headers."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from pathlib import Path

import pytest
from endpoint_servers import IN_CI

if not IN_CI:  # CI installs the endpoints extra, and must test it
    pytest.importorskip(
        "pyrate_limiter", reason="pyrate-limiter not installed; pip install 'shardwise[endpoints]'"
    )

from shardwise.models.endpoints.budget import Budgets, budget_file, reset_seconds


def _drain_then_time(folder: str, identity: str, tokens: int, started: multiprocessing.Event) -> float:  # type: ignore[valid-type]
    """In another process: wait until told, then time one acquire of ``tokens`` tokens."""
    started.wait(30)  # type: ignore[attr-defined]
    budgets = Budgets(identity, None, 600, Path(folder))
    began = time.monotonic()
    asyncio.run(budgets.acquire(tokens))
    return time.monotonic() - began


def test_a_tokens_budget_is_shared_by_the_processes_of_a_host(tmp_path: Path) -> None:
    identity = "openai http://127.0.0.1:1/v1\0m\0env:K"
    here = Budgets(identity, None, 600, tmp_path)  # 600 a minute: a burst of 600, then one every 0.1 s
    context = multiprocessing.get_context("spawn")
    started = context.Manager().Event()
    with context.Pool(2) as pool:
        shared = pool.apply_async(_drain_then_time, (str(tmp_path), identity, 30, started))
        other = pool.apply_async(_drain_then_time, (str(tmp_path), identity + "-other", 30, started))
        time.sleep(1.0)  # the workers are up and waiting: the burst is spent just before they ask
        asyncio.run(here.acquire(600))
        started.set()
        waited, fresh = shared.get(60), other.get(60)
    assert 2.5 <= waited <= 6.0  # 30 tokens just after another process spent the burst: about 3 s
    assert fresh < 1.0  # another endpoint's budget is its own
    assert budget_file(identity, tmp_path) != budget_file(identity + "-other", tmp_path)


def test_requests_per_minute_pace_requests_past_the_burst(tmp_path: Path) -> None:
    budgets = Budgets("e\0m\0k", 120, None, tmp_path)

    async def take(n: int) -> float:
        began = time.monotonic()
        for _ in range(n):
            await budgets.acquire(1)
        return time.monotonic() - began

    # 120 a minute: a burst of 120, then one every 0.5 s; two past the burst take about 1 s more.
    assert 0.9 <= asyncio.run(take(122)) <= 6.0


def test_usage_beyond_the_estimate_is_charged_to_the_next_request(tmp_path: Path) -> None:
    budgets = Budgets("e\0m\0k", None, 10_000, tmp_path)
    charged = asyncio.run(budgets.acquire(100))
    budgets.settle(charged, 350)
    assert asyncio.run(budgets.acquire(100)) == 350
    budgets.settle(100, 40)  # an over-estimate is not handed back
    assert asyncio.run(budgets.acquire(100)) == 100


def test_a_spent_budget_in_the_servers_headers_pauses_new_requests(tmp_path: Path) -> None:
    budgets = Budgets("e\0m\0k", None, None, tmp_path)
    budgets.heed({"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "20s"})
    began = time.monotonic()
    asyncio.run(budgets.acquire(1))
    assert time.monotonic() - began < 0.2  # requests left: no pause
    budgets.heed({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1.2s"})
    began = time.monotonic()
    asyncio.run(budgets.acquire(1))
    assert 1.0 <= time.monotonic() - began <= 2.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("1m30.5s", 90.5),
        ("120ms", 0.12),
        ("2", 2.0),
        ("0.5", 0.5),
        ("junk", 1.0),
    ],
)
def test_reset_times_as_servers_write_them(text: str, seconds: float) -> None:
    assert reset_seconds(text) == pytest.approx(seconds)


def test_an_rfc3339_reset_is_seconds_from_now() -> None:
    from datetime import datetime, timedelta, timezone

    at = (datetime.now(timezone.utc) + timedelta(seconds=30)).isoformat().replace("+00:00", "Z")
    assert 28 <= reset_seconds(at) <= 31
