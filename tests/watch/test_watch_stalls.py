"""A watcher whose connection stalls (a TCP proxy in front of PostgreSQL stops forwarding, closing nothing):
it notices at its next look, drops the connection, reconnects once the path forwards again, and announces
the rows written meanwhile. Without a client-side bound it would wait on that connection for ever."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from tcp_stall import StallingProxy
from watch_helpers import Recorder, insert, make_docs

from shardwise.watch import Backoff, PgNotifyWatcher, WatchSpec, WatermarkPoller, install_trigger

pytestmark = pytest.mark.postgres


def _wait(probe: Callable[[], object], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _rows(recorder: Recorder) -> int:
    return sum(int(p["rows"]) for p in recorder.payloads)


@pytest.fixture
def proxied(pg_url: str) -> Iterator[tuple[StallingProxy, str]]:
    proxy, url = StallingProxy.before(pg_url)
    try:
        yield proxy, f"{url}?connect_timeout=1"
    finally:
        proxy.close()


def _stalled_then_resumed(
    url: str, proxy: StallingProxy, recorder: Recorder, caplog: pytest.LogCaptureFixture, stall_s: float
) -> None:
    insert(url, [1, 2, 3])  # straight to the server
    _wait(lambda: _rows(recorder) >= 3)
    caplog.clear()
    proxy.stall()
    insert(url, [4, 5])  # its NOTIFY cannot get through
    # The look that meets the stall fails within its bound (a wait with no answer, or the pool's ping of
    # a stalled connection and then a new connection that cannot open), and the loop goes on.
    _wait(lambda: caplog.records, stall_s + 10)
    time.sleep(max(0.0, stall_s))
    proxy.resume()
    _wait(lambda: _rows(recorder) >= 5)


def test_a_listening_watcher_notices_a_stalled_connection_and_reconnects(
    pg_url: str, proxied: tuple[StallingProxy, str], caplog: pytest.LogCaptureFixture
) -> None:
    proxy, through = proxied
    make_docs(pg_url)
    install_trigger(pg_url, "docs", "id")
    recorder, stop = Recorder(), threading.Event()
    spec = WatchSpec(through, "docs", table="docs", debounce_s=0.05, timeout_s=1)
    watcher = PgNotifyWatcher(spec, recorder, check_s=0.5, wait_s=0.2, backoff=Backoff(0.1, 0.5))
    caplog.set_level(logging.WARNING, logger="shardwise.watch.loop")
    runner = threading.Thread(target=watcher.run, args=(stop,))
    runner.start()
    try:
        _wait(lambda: watcher.backend_pid)
        first = watcher.backend_pid
        started = time.monotonic()
        _stalled_then_resumed(pg_url, proxy, recorder, caplog, stall_s=1.0)
        assert time.monotonic() - started < 15
        assert "sent no answer for" in caplog.records[0].getMessage()  # its open connection stalled
        _wait(lambda: watcher.backend_pid)
        assert watcher.backend_pid != first  # a new connection
    finally:
        stop.set()
        runner.join(15)
        watcher.close()
    assert not runner.is_alive()
    assert [p["max_key"] for p in recorder.payloads][-1] == 5
    assert recorder.payloads[-1]["catch_up"], "the rows written during the stall came by catch-up"


def test_a_polling_watcher_gives_up_a_stalled_look_and_goes_on(
    pg_url: str, proxied: tuple[StallingProxy, str], caplog: pytest.LogCaptureFixture
) -> None:
    proxy, through = proxied
    make_docs(pg_url)
    recorder, stop = Recorder(), threading.Event()
    spec = WatchSpec(through, "docs", table="docs", mode="poll", interval_s=0.2, timeout_s=1)
    watcher = WatermarkPoller(spec, recorder, backoff=Backoff(0.1, 0.5))
    assert watcher.poll_once() == 0  # the baseline: the first look announces nothing
    caplog.set_level(logging.WARNING, logger="shardwise.watch.loop")
    runner = threading.Thread(target=watcher.run, args=(stop,))
    runner.start()
    try:
        _stalled_then_resumed(pg_url, proxy, recorder, caplog, stall_s=1.0)
    finally:
        stop.set()
        runner.join(15)
        watcher.close()
    assert not runner.is_alive()
    assert max(int(p["max_key"]) for p in recorder.payloads) == 5
