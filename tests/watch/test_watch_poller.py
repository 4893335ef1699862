"""WatermarkPoller on SQLite and PostgreSQL: max key or updated_at, persisted across restarts."""

from __future__ import annotations

import pytest
from watch_helpers import Recorder, assert_no_secret, execute, insert, make_docs, with_password

from shardwise.errors import ConfigError, SourceError
from shardwise.watch import ObjectWatcher, WatchSpec, WatermarkPoller, open_watcher


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def any_url(request: pytest.FixtureRequest) -> str:
    """The same test on SQLite and on PostgreSQL."""
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


def poller(url: str, recorder: Recorder, updated_at: str | None = None) -> WatermarkPoller:
    spec = WatchSpec(with_password(url), "docs", table="docs", updated_at=updated_at, interval_s=0.05)
    return WatermarkPoller(spec, recorder)


def test_max_key_watermark(any_url: str) -> None:
    make_docs(any_url, [1, 2, 3])
    recorder = Recorder()
    with poller(any_url, recorder) as p:
        assert p.poll_once() == 0  # the first look is the baseline
        assert p.poll_once() == 0
        insert(any_url, [4, 5])
        assert p.poll_once() == 1
        assert p.poll_once() == 0
    [payload] = recorder.take()
    assert payload["table"].endswith(".docs") and payload["mode"] == "key"
    assert (payload["max_key"], payload["rows"], payload["count"]) == (5, 2, 5)
    assert payload["source"].endswith("#" + payload["table"])

    insert(any_url, [6])  # while no poller runs
    with poller(any_url, recorder) as restarted:
        assert restarted.poll_once() == 1
        assert restarted.poll_once() == 0
    [payload] = recorder.take()
    assert (payload["max_key"], payload["rows"], payload["count"]) == (6, 1, 6)
    with poller(any_url, recorder) as again:
        assert again.poll_once() == 0
    assert_no_secret(recorder)


def test_updated_at_watermark_sees_updates(any_url: str) -> None:
    make_docs(any_url)
    execute(any_url, "INSERT INTO docs (id, text, updated_at) VALUES (1, 'a', '2024-01-01 00:00:00')")
    recorder = Recorder()
    with poller(any_url, recorder, updated_at="updated_at") as p:
        assert p.poll_once() == 0
        execute(any_url, "UPDATE docs SET text = 'b', updated_at = '2024-01-02 00:00:00' WHERE id = 1")
        assert p.poll_once() == 1
        assert p.poll_once() == 0
        execute(any_url, "INSERT INTO docs (id, text, updated_at) VALUES (2, 'c', '2024-01-03 00:00:00')")
    with poller(any_url, recorder, updated_at="updated_at") as restarted:
        assert restarted.poll_once() == 1
    first, second = recorder.payloads
    assert first["mode"] == "updated_at" and first["max_updated_at"].startswith("2024-01-02")
    assert (first["rows"], first["count"]) == (1, 1)
    assert second["max_updated_at"].startswith("2024-01-03") and (second["rows"], second["count"]) == (1, 2)


def test_bad_columns_and_names_are_refused(sqlite_url: str) -> None:
    make_docs(sqlite_url)
    recorder = Recorder()
    with pytest.raises(SourceError, match="updated_at column 'changed' not in table 'docs'"):
        poller(sqlite_url, recorder, updated_at="changed")
    with pytest.raises(ConfigError, match="timestamp, date or integer"):
        poller(sqlite_url, recorder, updated_at="text")
    with pytest.raises(SourceError, match="not in"):
        WatermarkPoller(WatchSpec(sqlite_url, "docs", table="docs; DROP TABLE docs"), recorder)
    with pytest.raises(SourceError, match="not in"):
        WatermarkPoller(WatchSpec(sqlite_url, "docs", table="docs", key="id) OR (1=1"), recorder)
    for bad in ("", "Docs", "-docs", "docs/raw", "a" * 64, "docs\n"):
        with pytest.raises(ConfigError, match="watcher name"):
            WatermarkPoller(WatchSpec(sqlite_url, bad, table="docs"), recorder)


def test_open_watcher_on_sqlite_and_paths(sqlite_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    make_docs(sqlite_url)
    recorder = Recorder()
    watcher = open_watcher(WatchSpec(sqlite_url, "docs", table="docs"), recorder)
    watcher.close()
    assert isinstance(watcher, WatermarkPoller)
    with pytest.raises(ConfigError, match="PostgreSQL"):
        open_watcher(WatchSpec(sqlite_url, "docs", table="docs", mode="notify"), recorder)
    with pytest.raises(ConfigError, match="needs the table"):
        open_watcher(WatchSpec(sqlite_url, "docs"), recorder)
    folder = open_watcher(WatchSpec(str(tmp_path), "files"), recorder)
    assert isinstance(folder, ObjectWatcher)
    with pytest.raises(ConfigError, match="SQL sources only"):
        open_watcher(WatchSpec(str(tmp_path), "files", table="docs"), recorder)
