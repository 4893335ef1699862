"""The flow tests' data: a docs table, shards that commit every 4 rows."""

from __future__ import annotations

import importlib

import pytest
from flow_data import make_docs


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
