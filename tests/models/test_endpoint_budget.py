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

from shardwise.models.endpoints.budget import Budgets, budget_file, burst, reset_seconds


def _take_one_by_one(
    folder: str,
    identity: str,
    tokens: int,
    started: multiprocessing.Event,  # type: ignore[valid-type]
) -> list[float]:
    """In another process: wait until told, then take ``tokens`` tokens one at a time; when each was
    admitted (the wall clock, which the budget's state and the other processes share)."""
    started.wait(30)  # type: ignore[attr-defined]
    budgets = Budgets(identity, None, 600, Path(folder))

    async def take() -> list[float]:
        admitted = []
        for _ in range(tokens):
            await budgets.acquire(1)
            admitted.append(time.time())
        return admitted

    return asyncio.run(take())


def _most_within(times: list[float], seconds: float) -> int:
    """The most of ``times`` that fall in any window of ``seconds``."""
    ordered = sorted(times)
    return max(sum(1 for t in ordered[i:] if t - start <= seconds) for i, start in enumerate(ordered))


def test_a_tokens_budget_is_shared_by_the_processes_of_a_host(tmp_path: Path) -> None:
    identity = "openai http://127.0.0.1:1/v1\0m\0env:K"
    per_s, burst_of = 10, burst(600)  # 600 a minute: 10 a second, a burst of one second's worth
    context = multiprocessing.get_context("spawn")
    started = context.Manager().Event()
    with context.Pool(3) as pool:
        shared = [pool.apply_async(_take_one_by_one, (str(tmp_path), identity, 60, started)) for _ in "ab"]
        other = pool.apply_async(_take_one_by_one, (str(tmp_path), identity + "-other", 30, started))
        time.sleep(1.0)  # the workers are up and waiting
        started.set()
        first, second = (result.get(120) for result in shared)
        apart = other.get(120)
    assert max(first) > min(second) and max(second) > min(first), "the two processes took tokens together"
    # Together they keep to one budget: in any 2 s, at most 2 s of tokens plus the burst (one process
    # alone could take that much; two with budgets of their own would take twice).
    assert _most_within(first + second, 2.0) <= 2 * per_s + burst_of + 1
    assert _most_within(apart, 2.0) >= 2 * per_s, "another endpoint's budget is its own"
    assert budget_file(identity, tmp_path) != budget_file(identity + "-other", tmp_path)


def test_requests_per_minute_are_spread_over_the_minute_not_sent_at_once(tmp_path: Path) -> None:
    per_minute = 1200  # 20 a second, a burst of one second's worth
    budgets = Budgets("e\0m\0k", per_minute, None, tmp_path)
    window_s = 1.5

    async def sent_within(seconds: float) -> int:
        sent = 0

        async def send() -> None:
            nonlocal sent
            await budgets.acquire(1)
            sent += 1

        tasks = [asyncio.ensure_future(send()) for _ in range(per_minute)]
        await asyncio.sleep(seconds)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return sent

    sent = asyncio.run(sent_within(window_s))
    share = per_minute * window_s / 60
    assert share <= sent <= share + burst(per_minute) + 1  # paced from the first request, not a burst of 1200


def test_a_request_dearer_than_the_burst_waits_for_its_tokens(tmp_path: Path) -> None:
    budgets = Budgets("e\0m\0k", None, 600, tmp_path)  # 10 tokens a second, a burst of 10
    began = time.monotonic()
    asyncio.run(budgets.acquire(30))
    assert 1.5 <= time.monotonic() - began <= 4.0  # 20 tokens past the burst: about 2 s


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
