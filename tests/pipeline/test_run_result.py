"""A run's typed result gives the finished event the payload it always had, the same keys first, then the
run's cost and usage: plain JSON."""

from __future__ import annotations

import json

from shardwise.cost import RunUsage
from shardwise.pipeline.run_result import (
    PAYLOAD_KEYS,
    InvocationCounts,
    MergeTotals,
    RunResult,
    ShardTally,
)
from shardwise.pipeline.skipped import Skipped
from shardwise.results import RunCounts

# The payload's keys before the result was typed: automations and their templates read these.
KEYS_AS_EVER = [
    "run_id", "status", "results_table", "model", "model_version", "rows_in", "rows_out", "rows_failed",
    "rows_skipped", "inserted", "updated", "unchanged", "shards_total", "shards_done", "shards_failed",
    "counts",
]  # fmt: skip
COST_KEYS = ["cost_usd", "device_seconds", "usage", "stopped"]
"""Added after them for issue 38: an automation can alert on a run's cost."""
USAGE = RunUsage(
    rows=11, counts={"prompt_tokens": 70, "completion_tokens": 30}, device_s={"cpu": 7.2}, cost_usd=0.005
)


def _result() -> RunResult:
    return RunResult(
        run_id="run-1",
        status="failed",
        results_table="shardwise_results",
        source="sqlite:///docs.db#docs",
        snapshot=None,
        model="tiny",
        model_version="abc123",
        code_version="1.0",
        started_by="cli",
        totals=RunCounts(12, 9, 2, 3, 2, 1, {"prompt_tokens": 70, "completion_tokens": 30}, USAGE),
        skipped=Skipped(null_key=1, already_scored=4),
        merge=MergeTotals(inserted=6, updated=2, unchanged=1),
        shards=ShardTally(planned=3, skipped=1, states={"done": 2, "failed": 1}),
    )


def test_the_event_payload_has_the_keys_and_values_it_always_had() -> None:
    payload = _result().event_payload()
    assert list(payload) == [*KEYS_AS_EVER, *COST_KEYS] == list(PAYLOAD_KEYS)
    assert {key: payload[key] for key in KEYS_AS_EVER} == {
        "run_id": "run-1", "status": "failed", "results_table": "shardwise_results", "model": "tiny",
        "model_version": "abc123", "rows_in": 12, "rows_out": 9, "rows_failed": 2, "rows_skipped": 5,
        "inserted": 6, "updated": 2, "unchanged": 1, "shards_total": 3, "shards_done": 2, "shards_failed": 1,
        "counts": {"prompt_tokens": 70, "completion_tokens": 30},
    }  # fmt: skip
    assert payload["cost_usd"] == 0.005 and payload["device_seconds"] == 7.2
    assert payload["usage"]["cost_usd_per_1k_rows"] == 0.005 * 1000 / 11
    assert payload["usage"]["cost_usd_per_1m_tokens"] == 0.005 * 1e6 / 100
    assert json.loads(json.dumps(payload)) == payload, "plain JSON: events carry it as is"


def test_an_encoders_payload_counts_nothing_and_this_invocation_is_the_difference() -> None:
    result = RunResult("r", "completed", "t", "s", None, "m", "v", "c", "cli")
    assert result.event_payload()["counts"] == {} and result.event_payload()["rows_skipped"] == 0
    assert result.event_payload()["cost_usd"] is None, "not priced: no dollars"
    before, after = RunCounts(10, 8, 1, 3, 1), RunCounts(30, 27, 2, 3, 3)
    assert InvocationCounts.between(before, after) == InvocationCounts(20, 19, 1, 2)
