"""``shardwise_provider_batches``: a window's provider batches, recorded in a transaction of their own and
read back by the window's identity, on SQLite and on real PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from flow_data import execute

from shardwise.errors import ConfigError
from shardwise.model.recorded import ProviderBatch, WindowRef
from shardwise.pipeline.batch_book import LedgerBook
from shardwise.results import Ledger
from shardwise.results.schema import LEDGER_TABLES
from shardwise.retry_policy import Outage, RetryPolicy

SUBMITTED = datetime(2026, 12, 6, 10, 0, tzinfo=timezone.utc)


def test_batches_are_recorded_per_window_and_found_again_by_a_new_ledger(db_url: str) -> None:
    assert "shardwise_provider_batches" in LEDGER_TABLES
    with Ledger(db_url) as ledger:
        ledger.ensure()
        book = LedgerBook(ledger, "run-1", 3, 100, Outage(RetryPolicy()))
        first = WindowRef(0, ("k1", "k2", "k3"), book)
        second = WindowRef(3, ("k4", "k5"), book)
        assert book.recorded(first) == []
        book.record(first, ProviderBatch(0, "openai", "batch-a", 2, SUBMITTED))
        book.record(first, ProviderBatch(1, "openai", "batch-b", 1, SUBMITTED + timedelta(seconds=1)))
        book.record(second, ProviderBatch(0, "openai", "batch-c", 2, SUBMITTED))
        # a racing writer's record of the same window and index keeps the first one
        book.record(first, ProviderBatch(0, "openai", "batch-z", 2, SUBMITTED))
        book.ended(first, 0, "completed")
        # a batch its provider lost is replaced by the one submitted in its place
        book.ended(second, 0, "lost")
        book.record(second, ProviderBatch(0, "openai", "batch-d", 2, SUBMITTED + timedelta(hours=1)))
        labels = {book.label(first, 0), book.label(first, 1), book.label(second, 0)}
        other_run = LedgerBook(ledger, "run-2", 3, 100, Outage(RetryPolicy()))
        assert len(labels | {other_run.label(first, 0)}) == 4, "a label names one batch of one run"

    with Ledger(db_url) as reopened:  # another process, after a kill
        book = LedgerBook(reopened, "run-1", 3, 100, Outage(RetryPolicy()))
        again = WindowRef(0, ("k1", "k2", "k3"), book)
        assert [(b.batch_id, b.status, b.rows_sent) for b in book.recorded(again)] == [
            ("batch-a", "completed", 2),
            ("batch-b", "submitted", 1),
        ]
        assert book.recorded(again)[0].submitted_at == SUBMITTED
        assert book.recorded(WindowRef(0, ("k1", "k2"), book)) == [], "another window is another identity"
        stored = reopened.provider_batches("run-1")
    assert [(s.shard_id, s.position, s.first_key, s.batch.batch_id) for s in stored] == [
        (3, 100, "k1", "batch-a"),
        (3, 100, "k1", "batch-b"),
        (3, 103, "k4", "batch-d"),
    ]
    assert stored[0].ended_at is not None and stored[1].ended_at is None
    assert (stored[2].batch.status, stored[2].ended_at) == ("submitted", None)
    assert stored[2].batch.submitted_at == SUBMITTED + timedelta(hours=1)
    assert execute(db_url, "select count(*) from shardwise_provider_batches")[0][0] == 3


def test_a_provider_batch_checks_itself() -> None:
    with pytest.raises(ConfigError, match="at least one row"):
        ProviderBatch(0, "openai", "batch-a", 0, SUBMITTED)
    with pytest.raises(ConfigError, match="aware"):
        ProviderBatch(0, "openai", "batch-a", 1, datetime(2026, 1, 1))
