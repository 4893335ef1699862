"""The one retry policy: backoff, the deadline every layer shares, and what happens past it.

A fake clock and sleep make these exact: no test here waits.
"""

from __future__ import annotations

import logging
import pickle

import pytest

from shardwise.errors import ConfigError, RetryDeadlineError, TransientError
from shardwise.retry_policy import DEFAULT_RETRY_DEADLINE_S, Outage, RetryPolicy, retry_step


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _down_until(time: FakeTime, back_at: float, calls: list[float]):
    def step() -> str:
        calls.append(time.now)
        if time.now < back_at:
            raise TransientError("connection refused")
        return "ok"

    return step


@pytest.mark.parametrize("outage_s", [0.1, 5.0, 59.9, 60.0])
def test_an_outage_up_to_the_deadline_is_ridden_out(outage_s: float) -> None:
    time, calls = FakeTime(), []
    outage = Outage(RetryPolicy(deadline_s=60, jitter=0), time.clock)
    assert retry_step(_down_until(time, outage_s, calls), what="x", outage=outage, sleep=time.sleep) == "ok"
    assert calls[-1] <= 60.0 and outage.elapsed() == 0  # the step succeeded: the outage is over


def test_past_the_deadline_the_step_gives_up_once_naming_the_deadline() -> None:
    time, calls = FakeTime(), []
    outage = Outage(RetryPolicy(deadline_s=60, jitter=0), time.clock)
    with pytest.raises(RetryDeadlineError) as caught:
        retry_step(
            _down_until(time, 61, calls), what="commit chunk 3 of shard 2", outage=outage, sleep=time.sleep
        )
    message = str(caught.value)
    assert "commit chunk 3 of shard 2" in message and "retry deadline of 60 s" in message
    assert "connection refused" in message and "--retry-deadline" in message
    assert calls[-1] == 60.0  # the last try lands on the deadline, not before and not after
    assert not isinstance(caught.value, TransientError)  # nothing above retries it again


def test_waits_double_from_the_base_up_to_the_cap() -> None:
    time = FakeTime()
    outage = Outage(RetryPolicy(deadline_s=30, backoff_s=0.5, backoff_cap_s=4, jitter=0), time.clock)
    with pytest.raises(RetryDeadlineError):
        retry_step(_down_until(time, 99, []), what="x", outage=outage, sleep=time.sleep)
    assert time.slept[:6] == [0.5, 1, 2, 4, 4, 4]
    assert sum(time.slept) == 30


def test_jitter_stays_within_its_fraction() -> None:
    policy = RetryPolicy(backoff_s=1, backoff_cap_s=1, jitter=0.25)
    waits = [policy.delay(1) for _ in range(500)]
    assert all(0.75 <= w <= 1.25 for w in waits) and len(set(waits)) > 100


def test_layers_share_one_clock_so_they_do_not_multiply_the_deadline() -> None:
    """A later step (or attempt) of the same outage gets what is left of the deadline, not a new one."""
    time = FakeTime()
    outage = Outage(RetryPolicy(deadline_s=10, jitter=0), time.clock)
    with pytest.raises(RetryDeadlineError):
        retry_step(_down_until(time, 99, []), what="first", outage=outage, sleep=time.sleep)
    assert time.now == 10
    with pytest.raises(RetryDeadlineError):  # past the deadline already: one try, no wait
        retry_step(_down_until(time, 99, []), what="second", outage=outage, sleep=time.sleep)
    assert time.now == 10


def test_a_success_ends_the_outage_and_the_next_one_gets_the_whole_deadline() -> None:
    time = FakeTime()
    outage = Outage(RetryPolicy(deadline_s=10, jitter=0), time.clock)
    retry_step(_down_until(time, 8, []), what="x", outage=outage, sleep=time.sleep)
    start = time.now
    retry_step(_down_until(time, start + 9, []), what="y", outage=outage, sleep=time.sleep)
    assert time.now - start >= 9


def test_a_permanent_error_is_raised_at_once() -> None:
    time, tries = FakeTime(), []

    def step() -> None:
        tries.append(1)
        raise ConfigError("bad")

    with pytest.raises(ConfigError):
        retry_step(step, what="x", outage=Outage(RetryPolicy(), time.clock), sleep=time.sleep)
    assert tries == [1] and time.slept == []


def test_deadline_zero_retries_nothing_and_reset_runs_after_each_failure() -> None:
    time, resets = FakeTime(), []
    with pytest.raises(RetryDeadlineError):
        retry_step(
            _down_until(time, 1, []),
            what="x",
            outage=Outage(RetryPolicy(deadline_s=0), time.clock),
            reset=lambda: resets.append(1),
            sleep=time.sleep,
        )
    assert time.slept == [] and resets == [1]


def test_each_retry_is_logged_with_its_try_number(caplog: pytest.LogCaptureFixture) -> None:
    time = FakeTime()
    caplog.set_level(logging.WARNING, logger="shardwise.retry_policy")
    retry_step(
        _down_until(time, 1.2, []), what="mark chunk 1", outage=Outage(RetryPolicy(jitter=0), time.clock),
        sleep=time.sleep,
    )  # fmt: skip
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(" failed on try ")[1].split()[0] for line in lines] == ["1", "2"]
    assert all(line.startswith("mark chunk 1") and "given up 120 s in" in line for line in lines)


def test_the_policy_checks_itself_and_travels_as_plain_data() -> None:
    for bad in (
        {"deadline_s": -1},
        {"attempts": 0},
        {"attempts": 51},
        {"jitter": 1},
        {"backoff_s": "1"},
        {"attempts": True},
    ):
        with pytest.raises(ConfigError, match="retry"):
            RetryPolicy(**bad)  # type: ignore[arg-type]
    policy = RetryPolicy(deadline_s=30, attempts=2)
    assert RetryPolicy.from_params(policy.to_params()) == policy == pickle.loads(pickle.dumps(policy))
    assert RetryPolicy.from_params(None).deadline_s == DEFAULT_RETRY_DEADLINE_S
    assert RetryPolicy.from_params({}, policy) == policy
    assert policy.task_delays() == [0.5] and RetryPolicy(attempts=4).task_delays() == [0.5, 1, 2]
