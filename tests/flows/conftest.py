"""Prefect's test harness for the flow tests, with result storage isolated per session; a docs table."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import pytest
from flow_data import make_docs


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    storage = tmp_path_factory.mktemp("prefect-results")
    # None: the start waits PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS (the harness's own default is
    # 30 s, which a loaded machine passes before the server answers).
    harness = prefect_test_harness(server_startup_timeout=None)
    with temporary_settings({PREFECT_RESULTS_LOCAL_STORAGE_PATH: storage}), harness:
        yield


@pytest.fixture
def docs(sqlite_url: str) -> str:
    """A SQLite database with ``docs`` (20 rows and the bad rows) and an empty ledger, so that "no run
    was recorded" is a count, not a missing table."""
    from shardwise.results import Ledger

    make_docs(sqlite_url, 20)
    with Ledger(sqlite_url) as ledger:
        ledger.ensure()
    return sqlite_url


@pytest.fixture
def chunks_of_4(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shards commit every 4 rows, so a run has several chunks (each timed, priced and resumable apart)."""
    worker = importlib.import_module("shardwise.pipeline.worker")
    chunks = importlib.import_module("shardwise.pipeline.chunks")
    monkeypatch.setattr(worker, "ChunkConfig", lambda rows: chunks.ChunkConfig(4))
