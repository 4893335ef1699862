"""A PostgreSQL restart while ``watch`` watches a table: rows inserted before, during and after it are
all announced, and the only-new runs those events start score every one of them.

The restart is of a cluster of the test's own (tests/pg_cluster.py), never the shared one. "During"
means after the server is back but before the watcher has reconnected: the NOTIFY of those rows is
lost, and the watcher's catch-up from the change counter must announce them.
"""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
from pg_cluster import OwnCluster
from spec_builder import flat_spec
from watch_helpers import Recorder, insert, make_docs

from shardwise.watch import Backoff, PgNotifyWatcher, WatchSpec, install_trigger

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _rows_announced(recorder: Recorder) -> int:
    return sum(int(p["rows"]) for p in recorder.payloads)


def _wait(probe, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not probe():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_inserts_around_a_restart_are_all_announced_and_scored(own_pg_cluster: OwnCluster, pipeline) -> None:
    cluster = own_pg_cluster
    url = cluster.url
    make_docs(url)
    install_trigger(url, "docs", "id")
    recorder, stop = Recorder(), threading.Event()
    # A slow first retry, so that rows inserted right after the restart land before it reconnects.
    backoff = Backoff(first_s=8.0, max_s=8.0)
    spec = WatchSpec(url, "docs", table="docs", debounce_s=0.1)
    watcher = PgNotifyWatcher(spec, recorder, check_s=60.0, backoff=backoff)
    runner = threading.Thread(target=watcher.run, args=(stop,))
    runner.start()
    try:
        _wait(lambda: watcher.backend_pid)
        insert(url, [1, 2, 3])  # before
        _wait(lambda: _rows_announced(recorder) >= 3)

        cluster.stop()
        cluster.start()
        insert(url, [4, 5, 6])  # during: the watcher is still waiting to reconnect
        _wait(lambda: _rows_announced(recorder) >= 6)
        insert(url, [7, 8, 9])  # after
        _wait(lambda: _rows_announced(recorder) >= 9)
    finally:
        stop.set()
        runner.join(15)
        watcher.close()
    assert not runner.is_alive()
    assert max(int(p["max_key"]) for p in recorder.payloads) == 9
    assert any(p["catch_up"] for p in recorder.payloads), "the rows of the restart came by catch-up"

    spec = flat_spec(
        source=url, results=url, results_table="scores", model="tiny", table="docs", only_new=True
    )
    for number, _ in enumerate(recorder.payloads):  # one only-new run per event, as the trigger would start
        pipeline.run(spec, f"event-{number}")
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            keys = sorted(int(k) for (k,) in conn.execute(sa.text("SELECT source_key FROM scores")))
    finally:
        engine.dispose()
    assert keys == list(range(1, 10))
