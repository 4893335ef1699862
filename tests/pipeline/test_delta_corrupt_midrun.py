"""A Delta log corrupted while a run scores fails the shard with the one line naming the table and the
fix, at once: not retried for the run's retry deadline."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from flow_data import make_docs
from spec_builder import flat_spec

from shardwise.errors import ConfigError
from shardwise.results import Ledger
from shardwise.retry_policy import RetryPolicy


def test_a_log_corrupted_mid_run_fails_its_shard_in_one_line(
    tmp_path: Path, sqlite_url: str, pipeline: Any
) -> None:
    make_docs(sqlite_url, 20)
    policy = RetryPolicy(deadline_s=600)
    lake = tmp_path / "lake"
    spec = flat_spec(
        model="tiny", source=sqlite_url, table="docs", results=str(lake), results_table="scores", retry=policy
    )
    planned = pipeline.plan(spec, "run-1")  # the table is made, empty: version 0
    (first,) = (lake / "scores" / "_delta_log").glob("*0.json")
    first.write_bytes(first.read_bytes()[:40])
    started = time.monotonic()
    try:
        with pytest.raises(ConfigError, match="has a corrupt log") as caught:
            pipeline.score(planned)
    finally:
        planned.close()
    assert time.monotonic() - started < policy.deadline_s / 10, "a corrupt log was retried as transient"
    assert "\n" not in str(caught.value)
    with Ledger(sqlite_url) as ledger:  # a SQL source's database holds the ledger
        summary = ledger.run_summary("run-1")
        assert summary is not None and summary.status == "failed"
        failed = [s for s in ledger.shards("run-1") if s.status == "failed"]
        assert failed and all("has a corrupt log" in (s.last_error or "") for s in failed), failed
