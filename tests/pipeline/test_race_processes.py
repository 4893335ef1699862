"""Two worker processes that get the same shard (a retried task whose first attempt still runs).

Each scores it fully (one chunk), then both commit it at the same moment: the
ledger's row lock, chunk mark and done check let exactly one merge the rows
and one mark the shard done, in a real race between processes.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
from flow_data import execute, make_docs
from spec_builder import flat_spec

from shardwise.pipeline import RunRef


def _score_at_the_barrier(ref: RunRef, barrier: Any, results: Any) -> None:
    from shardwise.models import get_spec
    from shardwise.pipeline import WorkerCache, score_ref_shard
    from shardwise.results import ChunkWriter

    real = ChunkWriter.commit

    def commit(self: ChunkWriter, chunk: Any) -> Any:
        barrier.wait(timeout=60)  # both have scored every row: now they race to merge
        return real(self, chunk)

    ChunkWriter.commit = commit  # type: ignore[method-assign]
    outcome = score_ref_shard(ref, 0, WorkerCache(get_spec))
    results.put((outcome.skipped, bool(outcome.merge), outcome.attempt, outcome.worker))


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_two_processes_racing_on_one_shard_commit_it_once(
    db: str, request: pytest.FixtureRequest, pipeline
) -> None:
    url = str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url"))
    make_docs(url, 150)
    spec = flat_spec(model="tiny", source=url, results=url, results_table="scores", table="docs", shards=1)
    planned = pipeline.plan(spec, "raced")
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    workers = [
        ctx.Process(target=_score_at_the_barrier, args=(planned.ref, barrier, results)) for _ in range(2)
    ]
    try:
        for w in workers:
            w.start()
        outcomes = [results.get(timeout=180) for _ in workers]
        for w in workers:
            w.join(30)
    finally:
        planned.close()
        for w in workers:
            if w.is_alive():
                w.kill()
    assert sorted((skipped, merged) for skipped, merged, _, _ in outcomes) == [(False, True), (True, False)]
    assert sorted(attempt for _, _, attempt, _ in outcomes) == [1, 2], "the ledger numbered both attempts"
    assert len({worker for *_, worker in outcomes}) == 2, "two processes"
    assert execute(url, "select count(*), count(distinct source_key) from scores") == [(150, 150)]
    assert execute(url, "select count(*) from shardwise_errors") == [(3,)], "dead letters stored once"
    assert execute(url, "select status, attempts from shardwise_shards") == [("done", 2)]
