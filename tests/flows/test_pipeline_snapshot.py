"""One snapshot per run on PostgreSQL, through the whole pipeline (no orchestrator needed)."""

from __future__ import annotations

import pytest
from flow_data import docs_spec, execute, make_docs


@pytest.mark.postgres
def test_rows_written_during_a_run_are_not_seen_by_it(pg_url: str, pipeline) -> None:
    make_docs(pg_url, 400, bad=False)
    prepared = pipeline.plan(docs_spec(pg_url, shards=4), "run-snap")
    try:
        execute(pg_url, "insert into docs (id, text) values (10000, 'inserted while the run was going')")
        execute(pg_url, "update docs set text = 'edited while running' where id = 0")
        counts = pipeline.score(prepared)
    finally:
        prepared.close()
    assert counts.rows_out == 400
    assert execute(pg_url, "select count(*) from scores where source_key = 10000") == [(0,)]
    fingerprint = execute(pg_url, "select input_fingerprint from scores where source_key = 0")[0][0]
    assert fingerprint != execute(pg_url, "select md5(text) from docs where id = 0")[0][0], (
        "read the old text"
    )
    snapshots = execute(pg_url, "select distinct input_snapshot from scores")
    assert len(snapshots) == 1 and snapshots[0][0] == prepared.plan.snapshot


@pytest.mark.postgres
def test_a_shard_scored_twice_is_merged_once(pg_url: str, pipeline) -> None:
    make_docs(pg_url, 100, bad=True)
    prepared = pipeline.plan(docs_spec(pg_url, shards=1), "run-twice")
    try:
        first = pipeline.shard(prepared, prepared.todo[0])
        second = pipeline.shard(prepared, prepared.todo[0])
    finally:
        prepared.close()
    assert not first.skipped and second.skipped
    assert execute(pg_url, "select count(*) from scores") == [(100,)]
    assert execute(pg_url, "select count(*) from shardwise_errors") == [(3,)]


def test_score_pending_marks_a_failing_shard_and_the_run_failed(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, pipeline
) -> None:
    import shardwise.pipeline.worker as worker_module

    make_docs(sqlite_url, 20, bad=False)
    prepared = pipeline.plan(docs_spec(sqlite_url, shards=1), "run-fails")

    def broken(**kwargs: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(worker_module, "score_shard", broken)
    try:
        with pytest.raises(RuntimeError, match="disk full"):
            pipeline.score(prepared)
    finally:
        prepared.close()
    assert execute(sqlite_url, "select status from shardwise_runs") == [("failed",)]
    assert execute(sqlite_url, "select status, last_error from shardwise_shards") == [("failed", "disk full")]
