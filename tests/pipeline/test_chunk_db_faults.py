"""PostgreSQL kills a chunk's COPY or merge INSERT, again and again: the step is retried, never the scoring.

A thread watches ``pg_stat_activity`` and terminates (``pg_terminate_backend``)
the backend that runs the staging ``COPY`` or the merge ``INSERT`` of a
multi-shard run, once per committed chunk. To catch an INSERT every time, it
first takes a SHARE lock on the results table, so the INSERT waits where the
thread can see it. Each shard runs under a task-like retry loop; the run must
complete with the results of a run without faults, every row having gone
through the engine exactly once.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np
import pytest
from flow_data import make_docs
from pg_faults import BackendKiller

from shardwise.batch.stats import BatchStats
from shardwise.cost import RunUsage
from shardwise.errors import TransientError
from shardwise.model import Model
from shardwise.pipeline import ChunkConfig, score_shard
from shardwise.records import RunRecord
from shardwise.results import ResultStore, RunCounts, read_marks
from shardwise.retry_policy import Outage, RetryPolicy
from shardwise.sources import SqlSource
from shardwise.sources.base import SourcePlan

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("one_torch_thread")]

ROWS, SHARDS, CHUNK = 6000, 4, 300
TARGETS = ("COPY", "INSERT") * 3


def _run(
    url: str, source: SqlSource, plan: SourcePlan, model: Model, table: str, retry: RetryPolicy
) -> tuple[ResultStore, RunRecord, int]:
    """Score every shard, each under a task's retry loop; returns the rows forward passes took."""
    store = ResultStore.sql(url, table, model.outputs, "int")
    store.ensure_schema()
    run = RunRecord(
        table, "test", {}, model.name, model.version, "code-1", plan.identity, plan.snapshot, table
    )
    store.ledger.start_run(run, plan)
    forwarded = 0

    def count(batch: BatchStats) -> None:
        nonlocal forwarded
        forwarded += batch.rows

    for shard in plan.shards:
        outage = Outage(retry)  # the shard's clock, shared by its attempts as the task layer shares it
        for task_try in range(4):
            try:
                score_shard(
                    source=source,
                    plan=plan,
                    shard=shard,
                    model=model,
                    store=store,
                    run=run,
                    on_batch=count,
                    chunking=ChunkConfig(CHUNK),
                    outage=outage,
                )
                break
            except TransientError:
                if task_try == 3:
                    raise
    return store, run, forwarded


def _results(store: ResultStore) -> list[tuple[Any, ...]]:
    return [
        tuple(
            v.tobytes() if isinstance(v, np.ndarray) else v
            for k, v in r.items()
            if k not in ("run_id", "scored_at")
        )
        for r in store.read_results()
    ]


def test_killed_copies_and_merges_cost_a_retried_step_not_a_rescored_shard(
    pg_url: str, tiny_model: Model, caplog: pytest.LogCaptureFixture
) -> None:
    make_docs(pg_url, ROWS)  # and three bad rows: dead letters
    retry = RetryPolicy(deadline_s=10, backoff_s=0.05, backoff_cap_s=0.2)
    with SqlSource(pg_url, "docs", "id", "text") as source:
        plan = source.plan(shards=SHARDS)
        clean, clean_run, _ = _run(pg_url, source, plan, tiny_model, "clean", retry)
        killer = BackendKiller(pg_url, "faulty", TARGETS)
        caplog.set_level(logging.WARNING, logger="shardwise.retry_policy")
        killer.start()
        try:
            store, run, forwarded = _run(pg_url, source, plan, tiny_model, "faulty", retry)
        finally:
            killer.stop.set()
            killer.join(10)
            killer.engine.dispose()
    print(f"\nbackends terminated: {len(killer.kills)}: {[k for k, _ in killer.kills]}")
    assert len(killer.kills) >= 4 and {k for k, _ in killer.kills} == {"COPY", "INSERT"}
    assert forwarded == ROWS, "a row went through the engine twice: a shard was scored again"
    assert [s.attempts for s in store.ledger.shards(run.run_id)] == [1] * SHARDS
    assert _results(store) == _results(clean)
    counts = store.ledger.finish_run(run.run_id, "completed")
    assert dataclasses.replace(counts, usage=RunUsage()) == RunCounts(ROWS + 3, ROWS, 3, SHARDS, SHARDS, 0)
    assert counts.usage.rows == ROWS + 3, "each chunk's usage recorded once, whatever the retries"
    assert len(store.ledger.dead_letters(run.run_id)) == 3
    marks = read_marks(store.ledger, run.run_id)
    assert len(marks) == len(read_marks(clean.ledger, clean_run.run_id))
    retries = [r.getMessage() for r in caplog.records if " failed on try " in r.getMessage()]
    assert len(retries) >= len(killer.kills)
    assert all("given up 10 s in" in line for line in retries)
    store.close()
    clean.close()
