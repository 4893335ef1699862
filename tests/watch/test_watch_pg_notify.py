"""PgNotifyWatcher and the change triggers on a real PostgreSQL: debounce, reconnects, catch-up."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pytest
import sqlalchemy as sa
from watch_helpers import Recorder, assert_no_secret, execute, insert, make_docs, with_password

from shardwise.errors import ConfigError, SourceError, TransientError
from shardwise.watch import (
    EVENT,
    Backoff,
    PgNotifyWatcher,
    WatchSpec,
    WatermarkPoller,
    install_trigger,
    open_watcher,
    trigger_installed,
    uninstall_trigger,
)

pytestmark = pytest.mark.postgres

T = TypeVar("T")


def watcher(url: str, recorder: Recorder, debounce_s: float = 0.4, **options: object) -> PgNotifyWatcher:
    spec = WatchSpec(with_password(url), "docs", table="docs", debounce_s=debounce_s)
    return PgNotifyWatcher(spec, recorder, **{"check_s": 60.0, **options})  # type: ignore[arg-type]


def terminate(url: str, pid: int) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            assert conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar()
    finally:
        engine.dispose()


def test_trigger_debounces_statements_into_one_event(pg_url: str) -> None:
    make_docs(pg_url)
    install_trigger(with_password(pg_url), "docs", "id")
    install_trigger(pg_url, "docs", "id")  # idempotent
    assert trigger_installed(pg_url, "docs", "id")
    recorder = Recorder()
    with watcher(pg_url, recorder) as w:
        assert w.poll_once(0.1) == 0  # connects; nothing changed since the trigger was installed
        insert(pg_url, [1, 2, 3])
        polling = threading.Thread(target=w.poll_once, args=(5.0,))
        polling.start()
        insert(pg_url, [4, 5])  # within the debounce window of the first statement
        polling.join()
        assert len(recorder.events) == 1
        event, resource, payload = recorder.events[0]
        assert event == EVENT == "shardwise.data.landed"
        assert resource == {"prefect.resource.id": "shardwise.source.docs", "prefect.resource.name": "docs"}
        assert payload["table"] == "public.docs" and payload["mode"] == "counter"
        assert (payload["max_key"], payload["rows"], payload["seq"]) == (5, 5, 2)
        assert payload["ops"] == ["INSERT"] and payload["catch_up"] is False
        assert payload["source"].endswith("#public.docs")
        assert w.poll_once(0.2) == 0  # quiet when nothing changed

        execute(pg_url, "UPDATE docs SET text = 'changed' WHERE id <= 2")
        assert w.poll_once(5.0) == 1
        update = recorder.payloads[-1]
        assert (update["ops"], update["rows"], update["max_key"], update["seq"]) == (["UPDATE"], 2, 2, 3)
    assert_no_secret(recorder)


def test_dropped_connection_loses_no_change(pg_url: str) -> None:
    make_docs(pg_url)
    install_trigger(pg_url, "docs", "id")
    insert(pg_url, [1])
    recorder = Recorder()
    with watcher(pg_url, recorder) as w:
        assert w.poll_once(0.1) == 1  # a row inserted after installing, before the watcher ran
        assert recorder.take()[0]["catch_up"] is True
        pid = w.backend_pid
        assert pid is not None
        terminate(pg_url, pid)
        insert(pg_url, [2, 3, 4])  # committed while the watcher is disconnected: its NOTIFY is lost
        with pytest.raises(TransientError):
            w.poll_once(2.0)
        assert w.backend_pid is None
        assert w.poll_once(0.1) == 1  # reconnects and catches up from the counter
        assert w.backend_pid not in (None, pid)
        [payload] = recorder.take()
        assert (payload["rows"], payload["max_key"], payload["catch_up"]) == (3, 4, True)
        assert w.poll_once(0.2) == 0
    assert_no_secret(recorder)


def test_run_loop_reconnects_with_backoff(pg_url: str) -> None:
    make_docs(pg_url)
    install_trigger(pg_url, "docs", "id")
    recorder, stop = Recorder(), threading.Event()
    w = watcher(pg_url, recorder, debounce_s=0.05, wait_s=0.1, backoff=Backoff(first_s=0.05, max_s=0.2))
    runner = threading.Thread(target=w.run, args=(stop,))
    runner.start()
    try:
        pid = wait_for(lambda: w.backend_pid)
        terminate(pg_url, pid)
        execute(pg_url, "INSERT INTO docs (id, text) VALUES (10, 'a'), (11, 'b')")
        wait_for(lambda: recorder.events or None)
    finally:
        stop.set()
        runner.join(10)
        w.close()
    assert not runner.is_alive()
    assert sum(p["rows"] for p in recorder.payloads) == 2
    assert max(p["max_key"] for p in recorder.payloads) == 11


def wait_for(probe: Callable[[], T | None], timeout_s: float = 10.0) -> T:
    """``probe()``'s first truthy value, polled every 20 ms."""
    deadline = time.monotonic() + timeout_s
    while not (found := probe()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
    return found


def test_restarted_watcher_catches_up_from_stored_state(pg_url: str) -> None:
    make_docs(pg_url)
    install_trigger(pg_url, "docs", "id")
    recorder = Recorder()
    with watcher(pg_url, recorder) as first:
        first.poll_once(0.1)
        insert(pg_url, [1, 2])
        assert first.poll_once(5.0) == 1
    insert(pg_url, [3])  # while no watcher runs
    execute(pg_url, "UPDATE docs SET text = 'x' WHERE id = 1")
    recorder.take()
    with watcher(pg_url, recorder) as second:
        assert second.poll_once(0.1) == 1
        [payload] = recorder.take()
        assert (payload["seq"], payload["rows"], payload["catch_up"]) == (3, 2, True)
        assert second.poll_once(0.2) == 0
    with watcher(pg_url, recorder) as third:  # and again: nothing changed, nothing announced
        assert third.poll_once(0.2) == 0
    assert recorder.take() == []


def test_without_trigger_the_watcher_catches_up_by_watermark(pg_url: str) -> None:
    make_docs(pg_url, [1, 2])
    install_trigger(pg_url, "docs", "id")
    uninstall_trigger(pg_url, "docs", "id")
    uninstall_trigger(pg_url, "docs", "id")  # idempotent
    assert not trigger_installed(pg_url, "docs", "id")
    recorder = Recorder()
    with watcher(pg_url, recorder) as w:
        assert w.poll_once(0.1) == 0  # a watermark's first look is a baseline
        pid = w.backend_pid
        assert pid is not None
        terminate(pg_url, pid)
        insert(pg_url, [3, 4, 5])
        with pytest.raises(TransientError):
            w.poll_once(2.0)
        assert w.poll_once(0.1) == 1
    [payload] = recorder.payloads
    assert (payload["mode"], payload["max_key"], payload["rows"], payload["count"]) == ("key", 5, 3, 5)


def test_open_watcher_picks_notify_only_with_the_trigger(pg_url: str) -> None:
    make_docs(pg_url)
    recorder = Recorder()
    polled = open_watcher(WatchSpec(pg_url, "docs", table="docs"), recorder)
    polled.close()
    assert isinstance(polled, WatermarkPoller)
    install_trigger(pg_url, "docs", "id")
    notified = open_watcher(WatchSpec(pg_url.replace("+psycopg", ""), "docs", table="docs"), recorder)
    notified.close()
    assert isinstance(notified, PgNotifyWatcher)
    forced = open_watcher(WatchSpec(pg_url, "docs", table="docs", mode="poll"), recorder)
    forced.close()
    assert isinstance(forced, WatermarkPoller)


@pytest.mark.parametrize(
    ("table", "key"),
    [('docs"; DROP TABLE docs; --', "id"), ("docs", "id); DROP TABLE docs; --"), ("docs", 'id"')],
)
def test_identifier_injection_is_refused(pg_url: str, table: str, key: str) -> None:
    make_docs(pg_url, [1])
    refused = "not in|is not NAME or SCHEMA.NAME"  # a stray '"' breaks the [schema.]name grammar itself
    with pytest.raises(SourceError, match=refused):
        install_trigger(pg_url, table, key)
    with pytest.raises(SourceError, match=refused):
        PgNotifyWatcher(WatchSpec(pg_url, "docs", table=table, key=key), Recorder())
    execute(pg_url, "SELECT count(*) FROM docs")  # still there


def test_bad_name_is_refused_before_connecting(pg_url: str) -> None:
    with pytest.raises(ConfigError, match="watcher name"):
        PgNotifyWatcher(WatchSpec(pg_url, "Docs!", table="docs"), Recorder())
