"""A shard's live progress on the worker side, and the run snapshot computed from the ledger's rows."""

from __future__ import annotations

import logging
import threading

import pytest
from flow_data import docs_spec, make_docs, slow_tiny_shards

from shardwise.pipeline import RunSpec, read_progress
from shardwise.results import Ledger, ShardProgress

ROWS = 400


@pytest.fixture
def slow_scoring(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each forward pass of the tiny model takes a little longer, and shards report every 20 ms."""
    slow_tiny_shards(monkeypatch, 0.02, 0.02)


def _spec(url: str) -> RunSpec:
    return docs_spec(url, shards=1, precision="fp32")


def test_a_snapshot_counts_done_rows_running_progress_and_failed_shards() -> None:
    shards = [
        ShardProgress(0, "done", 100, 98, 2, 40, 0),  # done: its rows_in, whatever it last reported
        ShardProgress(1, "failed", 50, None, None, 30, 3),  # rolled back: none of its rows are done
        ShardProgress(2, "pending", 100, None, None, 40, 1),  # running
        ShardProgress(3, "pending", 80, None, None, None, None),  # not started
        ShardProgress(4, "pending", 10, None, None, 15, 0),  # past its estimate
    ]
    snap = read_progress("r", shards, elapsed_s=10.0, rows_before=98)
    assert (snap.shards_total, snap.shards_done, snap.shards_failed) == (5, 1, 1)
    assert (snap.rows_done, snap.rows_total, snap.dead_letters) == (98 + 40 + 15, 98 + 50 + 100 + 80 + 15, 3)
    assert snap.rows_per_s == pytest.approx(5.5), "rows done before watching began are not this run's speed"
    assert snap.eta_s == pytest.approx((343 - 153) / 5.5)
    assert snap.counts == {} and snap.counts_per_s == {}, "no shard reported count outputs"
    assert read_progress("r", [], elapsed_s=0.0).percent == 100.0
    assert read_progress("r", shards[3:4], elapsed_s=1.0).eta_s is None, "no speed yet: no estimate"


def test_a_snapshot_sums_the_count_outputs_of_done_and_running_shards() -> None:
    shards = [
        ShardProgress(0, "done", 10, 10, 0, 10, 0, {"completion_tokens": 60, "prompt_tokens": 200}),
        ShardProgress(1, "failed", 10, None, None, 4, 0, {"completion_tokens": 24}),  # none of it counts
        ShardProgress(2, "pending", 10, None, None, 5, 0, {"completion_tokens": 30, "prompt_tokens": 90}),
        ShardProgress(3, "pending", 10, None, None, None, None),
    ]
    snap = read_progress("r", shards, elapsed_s=3.0, counts_before={"completion_tokens": 60})
    assert snap.counts == {"completion_tokens": 90, "prompt_tokens": 290}
    assert snap.counts_per_s == pytest.approx({"completion_tokens": 10.0, "prompt_tokens": 290 / 3})
    assert read_progress("r", shards, elapsed_s=0.0).counts_per_s == {
        "completion_tokens": 0,
        "prompt_tokens": 0,
    }


def test_a_running_shard_reports_its_progress_to_the_ledger(
    sqlite_url: str, pipeline, slow_scoring: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_docs(sqlite_url, ROWS, bad=False)
    reports: list[tuple[int, int, bool]] = []
    real = Ledger.record_progress

    def recorded(self, run_id, shard_id, attempt, rows, failed, counts=None):  # type: ignore[no-untyped-def]
        assert not counts, "the tiny encoder declares no count outputs"
        reports.append((rows, failed, real(self, run_id, shard_id, attempt, rows, failed, counts)))
        return reports[-1][2]

    monkeypatch.setattr(Ledger, "record_progress", recorded)
    _, counts = pipeline.run(_spec(sqlite_url), "reported")
    assert counts.rows_out == ROWS
    assert any(0 < rows < ROWS and ok for rows, _, ok in reports), reports
    assert [r for r, _, _ in reports] == sorted(r for r, _, _ in reports), "progress only moves forward"


def test_a_failing_progress_write_does_not_fail_the_shard(
    sqlite_url: str, pipeline, slow_scoring: None, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    make_docs(sqlite_url, ROWS)
    calls: list[str] = []

    def broken(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(threading.current_thread().name)
        raise RuntimeError("the ledger is on fire (simulated)")

    monkeypatch.setattr(Ledger, "record_progress", broken)
    with caplog.at_level(logging.DEBUG, logger="shardwise.pipeline.reporter"):
        _, counts = pipeline.run(_spec(sqlite_url), "unreported")
    assert (counts.shards_done, counts.rows_out, counts.rows_failed) == (1, ROWS, 3)
    assert len(calls) >= 2, "the reporter kept trying on later ticks"
    assert set(calls) == {"shard-0-progress"}, "only the background thread writes progress"
    assert "the ledger is on fire" in caplog.text
