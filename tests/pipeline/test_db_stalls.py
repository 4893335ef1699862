"""A run whose ledger or SQL sink hangs: a lock held on the results table by another session, and a network
path to PostgreSQL that stops forwarding (a stalling TCP proxy). The hung step fails at its bound, is tried
again on a new connection, and the run completes exactly; or, hung past the retry deadline, the shard fails
with one line naming the deadline.

Bounds are small here (``RetryPolicy(db_timeout_s=...)``, recorded in the run's plan like the rest of its
retry policy); a run's default is a minute.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from flow_data import make_docs
from spec_builder import flat_spec
from tcp_stall import StallingProxy

from shardwise.errors import RetryDeadlineError
from shardwise.pipeline import RunSpec
from shardwise.retry_policy import RetryPolicy

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("one_torch_thread")]

ROWS, CHUNK = 1500, 50
FAST = {"backoff_s": 0.05, "backoff_cap_s": 0.5}


@pytest.fixture
def source(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'source.db'}"
    make_docs(url, ROWS)  # and three bad rows: dead letters
    return url


def _spec(source: str, results: str, table: str, retry: RetryPolicy, ledger: str | None = None) -> RunSpec:
    return flat_spec(
        source=source,
        table="docs",
        model="tiny",
        precision="fp32",
        shards=1,
        chunk_rows=CHUNK,
        results=results,
        results_table=table,
        ledger=ledger,
        retry=retry,
    )


def _stored(url: str, table: str) -> dict[int, bytes]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(f"SELECT source_key, embedding FROM {table}")).all()
    finally:
        engine.dispose()
    keys = [int(k) for k, _ in rows]
    assert len(keys) == len(set(keys))
    return {int(k): np.asarray(v, dtype=np.float32).tobytes() for k, v in rows}


@pytest.fixture
def clean(source: str, pg_url: str, pipeline: Any) -> dict[int, bytes]:
    """What an undisturbed run stores."""
    pipeline.run(_spec(source, pg_url, "clean", RetryPolicy()), "clean")
    return _stored(pg_url, "clean")


def _retries(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if " failed on try " in r.getMessage()]


def _marks(url: str, run_id: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            found = sa.text("SELECT count(*) FROM shardwise_chunks WHERE run_id = :run_id")
            return int(conn.execute(found, {"run_id": run_id}).scalar_one())
    finally:
        engine.dispose()


class _LockHolder:
    """Another session holding a SHARE lock on the results table (the merge's INSERT waits on it)."""

    def __init__(self, url: str, table: str) -> None:
        self.engine = sa.create_engine(url)
        self.conn = self.engine.connect()
        self.conn.exec_driver_sql("BEGIN")
        self.conn.exec_driver_sql(f"LOCK TABLE {table} IN SHARE MODE")

    def release(self) -> None:
        self.conn.exec_driver_sql("ROLLBACK")
        self.conn.close()
        self.engine.dispose()


def test_a_merge_waiting_on_a_lock_fails_at_the_bound_and_lands_once_the_lock_goes(
    source: str, pg_url: str, pipeline: Any, clean: dict[int, bytes], caplog: pytest.LogCaptureFixture
) -> None:
    retry = RetryPolicy(deadline_s=60, db_timeout_s=2, **FAST)
    planned = pipeline.plan(_spec(source, pg_url, "scores", retry), "locked")
    holder = _LockHolder(pg_url, "scores")  # the table exists: planning made it
    releaser = threading.Timer(5.0, holder.release)
    caplog.set_level(logging.WARNING, logger="shardwise.retry_policy")
    releaser.start()
    started = time.monotonic()
    try:
        pipeline.score(planned)
    finally:
        releaser.join()
        planned.close()
    assert time.monotonic() - started > 5  # it did wait for the lock
    tries = _retries(caplog)
    assert len(tries) >= 2 and all("lock timeout" in line and "55P03" in line for line in tries), tries
    assert all(line.startswith("commit chunk 0 of shard 0 to scores failed on try") for line in tries)
    assert _stored(pg_url, "scores") == clean


def test_a_lock_held_past_the_retry_deadline_fails_the_shard_in_one_line(
    source: str, pg_url: str, pipeline: Any
) -> None:
    retry = RetryPolicy(deadline_s=3, db_timeout_s=1, **FAST)
    planned = pipeline.plan(_spec(source, pg_url, "scores", retry), "locked")
    holder = _LockHolder(pg_url, "scores")
    started = time.monotonic()
    try:
        with pytest.raises(RetryDeadlineError) as failed:
            pipeline.score(planned)
    finally:
        holder.release()
        planned.close()
    assert time.monotonic() - started < 3 + 1 + 2  # the deadline, one bounded try past it, the margin
    message = str(failed.value)
    assert "\n" not in message
    assert message.startswith("commit chunk 0 of shard 0 to scores kept failing for ")
    assert "past the retry deadline of 3 s" in message and "lock timeout" in message


@pytest.fixture
def proxied(pg_url: str) -> Iterator[tuple[StallingProxy, str]]:
    proxy, url = StallingProxy.before(pg_url)
    try:
        yield proxy, f"{url}?connect_timeout=2"
    finally:
        proxy.close()


def _stall_once_chunks_land(proxy: StallingProxy, url: str, run_id: str, stall_s: float) -> threading.Thread:
    """Stall the proxy for ``stall_s`` once the run's first chunk is marked (seen on a direct connection)."""

    def stall() -> None:
        deadline = time.monotonic() + 60
        while _marks(url, run_id) < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        proxy.stall()
        time.sleep(stall_s)
        proxy.resume()

    thread = threading.Thread(target=stall, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("stalled", ["ledger", "sink"])
def test_a_stalled_connection_mid_run_is_given_up_and_the_run_completes_exactly(
    stalled: str,
    source: str,
    pg_url: str,
    proxied: tuple[StallingProxy, str],
    pipeline: Any,
    clean: dict[int, bytes],
    caplog: pytest.LogCaptureFixture,
) -> None:
    proxy, through = proxied
    retry = RetryPolicy(deadline_s=60, db_timeout_s=1.5, **FAST)
    # One store goes through the proxy, the other straight to the server.
    results, ledger = (pg_url, through) if stalled == "ledger" else (through, pg_url)
    caplog.set_level(logging.WARNING, logger="shardwise.retry_policy")
    planned = pipeline.plan(_spec(source, results, "scores", retry, ledger), "stalled")
    staller = _stall_once_chunks_land(proxy, pg_url, "stalled", 6.0)
    try:
        pipeline.score(planned)
    finally:
        staller.join()
        planned.close()
    tries = _retries(caplog)
    assert tries, "no step met the stall"
    steps = {line.split(" failed on try ")[0] for line in tries}
    if stalled == "ledger":
        assert all(step.startswith(("check chunk", "mark ")) for step in steps), steps
    else:
        assert all(step.startswith(("commit chunk", "seal shard")) for step in steps), steps
    assert _stored(pg_url, "scores") == clean


def test_a_connection_stalled_past_the_retry_deadline_fails_the_shard_in_one_line(
    source: str, pg_url: str, proxied: tuple[StallingProxy, str], pipeline: Any
) -> None:
    proxy, through = proxied
    retry = RetryPolicy(deadline_s=4, db_timeout_s=1, **FAST)
    planned = pipeline.plan(_spec(source, through, "scores", retry, pg_url), "stalled")
    _stall_once_chunks_land(proxy, pg_url, "stalled", 30.0)
    started = time.monotonic()
    try:
        with pytest.raises(RetryDeadlineError) as failed:
            pipeline.score(planned)
        elapsed = time.monotonic() - started
    finally:
        proxy.resume()
        planned.close()
    # The deadline counts from the first failure; before it, one try (ping 2 s + connect 2 s); after it,
    # at most one more try.
    assert elapsed < 4 + 2 * 4 + 2, elapsed
    message = str(failed.value)
    assert "\n" not in message and "past the retry deadline of 4 s" in message, message
    assert message.startswith("commit chunk "), message
