"""A shard commits chunk by chunk: the same rows as one merge, and a retry resumes after the last chunk.

Every test scores a real table (SQLite, PostgreSQL or local Parquet) with the
tiny model through :func:`score_shard`, and compares the results table with
an uninterrupted run's, lineage included. Windows of 100 rows and chunks of
200: a chunk ends where a window ends, so the batches, and so the vectors,
are the same however the shard was cut or interrupted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from flow_data import make_docs, texts

from shardwise.batch.config import EngineConfig
from shardwise.batch.stats import BatchStats
from shardwise.cost import RunUsage
from shardwise.errors import ConfigError
from shardwise.model import Model
from shardwise.pipeline import ChunkConfig, ShardOutcome, score_shard
from shardwise.records import RunRecord
from shardwise.results import ResultStore, RunCounts, read_marks
from shardwise.sources import ParquetSource, SqlSource
from shardwise.sources.base import Source, SourcePlan

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROWS = 1000  # good rows; make_docs adds three bad ones (keys 900001..900003), dead letters at the end
WINDOW, CHUNK = 100, 200


class Crash(Exception):
    """The scoring failed mid-shard (a worker dying, a broken device): the task would retry it."""


@dataclass
class Shard0:
    """Shard 0 of a one-shard plan of ``source``, scored into results tables of ``url``."""

    url: str
    source: Source
    plan: SourcePlan
    model: Model

    def store(self, table: str) -> ResultStore:
        key_type = "int" if self.plan.params.get("key_type") == "int" else "text"
        store = ResultStore.sql(self.url, table, self.model.outputs, key_type)
        store.ensure_schema()
        return store

    def start(self, store: ResultStore, run_id: str) -> RunRecord:
        m = self.model
        record = RunRecord(
            run_id,
            "test",
            {},
            m.name,
            m.version,
            "code-1",
            self.plan.identity,
            self.plan.snapshot,
            store.results_table,
        )
        store.ledger.start_run(record, self.plan)
        return record

    def score(
        self, store: ResultStore, run: RunRecord, chunk_rows: int = CHUNK, crash_at: int | None = None
    ) -> tuple[ShardOutcome | None, int]:
        """One attempt; its outcome (None when it crashed) and the rows it pushed through forward passes."""
        forwarded = 0

        def on_batch(batch: BatchStats) -> None:
            nonlocal forwarded
            forwarded += batch.rows
            if crash_at is not None and forwarded >= crash_at:
                raise Crash(f"crashed after {forwarded} rows")

        try:
            outcome = score_shard(
                source=self.source,
                plan=self.plan,
                shard=self.plan.shards[0],
                model=self.model,
                store=store,
                run=run,
                config=EngineConfig(window_rows=WINDOW),
                on_batch=on_batch,
                chunking=ChunkConfig(chunk_rows),
            )
        except Crash:
            return None, forwarded
        return outcome, forwarded

    def clean(self, table: str = "clean") -> list[tuple[Any, ...]]:
        """The results of an uninterrupted run, in chunks of CHUNK rows."""
        with self.store(table) as store:
            self.score(store, self.start(store, "clean-run"))
            return results(store)


def results(store: ResultStore) -> list[tuple[Any, ...]]:
    """Every result row, but for its run id and time: keys, vectors, fingerprints and the rest of lineage."""
    skip = {"run_id", "scored_at"}
    return [
        tuple(v.tobytes() if isinstance(v, np.ndarray) else v for k, v in row.items() if k not in skip)
        for row in store.read_results()
    ]


def dead(store: ResultStore, run_id: str) -> list[tuple[Any, ...]]:
    return sorted((d.source_key, d.error_class, d.message) for d in store.ledger.dead_letters(run_id))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "parquet"])
def shard0(request: pytest.FixtureRequest, tiny_model: Model, tmp_path: Path) -> Iterator[Shard0]:
    """1003 rows (three of them dead letters) as one shard: a SQL table, or Parquet files with null keys."""
    if request.param == "parquet":
        source: Source = ParquetSource(str(_parquet(tmp_path)))
        url = f"sqlite:///{tmp_path / 'results.db'}"
    else:
        url = str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))
        make_docs(url, ROWS)
        source = SqlSource(url, "docs", "id", "text")
    try:
        yield Shard0(url, source, source.plan(shards=1), tiny_model)
    finally:
        source.close()


def _parquet(root: Path) -> Path:
    """Two files of 70-row row groups; every 15th row has a null key (never read), three bad texts last."""
    values: list[Any] = texts(ROWS)
    keys: list[int | None] = [None if i % 15 == 7 else i for i in range(ROWS)]
    values += [None, "", "  \t "]
    keys += [900_001, 900_002, 900_003]
    good = len([k for k in keys if k is not None])
    for name, lo, hi in (("a", 0, 600), ("b", 600, len(keys))):
        table = pa.table({"id": pa.array(keys[lo:hi], pa.int64()), "text": values[lo:hi]})
        pq.write_table(table, root / f"{name}.parquet", row_group_size=70)
    assert good > ROWS * 0.9
    return root


def test_a_shard_of_six_chunks_gives_the_rows_of_a_one_chunk_run(shard0: Shard0) -> None:
    with shard0.store("whole") as whole:
        one = shard0.start(whole, "one-chunk")
        outcome, _ = shard0.score(whole, one, chunk_rows=100 * CHUNK)
        assert outcome is not None and outcome.engine["chunks"] == 1
        reference = results(whole)
        reference_dead = dead(whole, one.run_id)
    with shard0.store("chunked") as store:
        run = shard0.start(store, "chunked")
        outcome, forwarded = shard0.score(store, run)
        assert outcome is not None and not outcome.skipped
        total = outcome.rows_in
        assert results(store) == reference and dead(store, run.run_id) == reference_dead
        assert forwarded == total - 3  # every row through the engine once; dead letters never reach it
        marks = read_marks(store.ledger, run.run_id)
        assert [m.chunk for m in marks] == list(range(-(-total // CHUNK)))
        assert [m.position["rows"] for m in marks] == [min((i + 1) * CHUNK, total) for i in range(len(marks))]
        assert marks[-1].position["key"] == 900_003 and marks[-1].rows_failed == 3
        assert sum(m.rows_in for m in marks) == total and sum(m.rows_inserted for m in marks) == total - 3
        (stored,) = store.ledger.shards(run.run_id)
        assert (stored.rows_in, stored.rows_out, stored.rows_failed, stored.rows_inserted) == (
            total,
            total - 3,
            3,
            total - 3,
        )
        assert (outcome.rows_in, outcome.rows_out, outcome.rows_failed) == (total, total - 3, 3)
        assert outcome.merge is not None and outcome.merge.inserted == total - 3
        counts = store.ledger.finish_run(run.run_id, "completed")
        assert dataclasses.replace(counts, usage=RunUsage()) == RunCounts(total, total - 3, 3, 1, 1, 0)
        usage = counts.usage  # each chunk timed on its device, none priced (no price per device-hour)
        assert (usage.rows, usage.unpriced, usage.cost_usd, set(usage.device_s)) == (
            total,
            len(marks),
            None,
            {"cpu"},
        )


def test_a_shard_that_crashes_resumes_after_its_last_committed_chunk(shard0: Shard0) -> None:
    reference = shard0.clean()
    with shard0.store("resumed") as store:
        run = shard0.start(store, "resumed")
        crashed, before = shard0.score(store, run, crash_at=650)
        assert crashed is None and 3 * CHUNK < before < 4 * CHUNK  # it crashed in the fourth chunk
        committed = sum(m.rows_in for m in read_marks(store.ledger, run.run_id))
        assert committed == 3 * CHUNK
        (listed,) = [r for r in store.ledger.recent_runs() if r.run_id == run.run_id]
        summary = store.ledger.run_summary(run.run_id)
        assert summary is not None and summary.counts.rows_in == committed, "live counts see committed chunks"
        assert listed.counts.rows_out + listed.counts.rows_failed == committed, "and so does the runs listing"
        outcome, after = shard0.score(store, run)
        assert outcome is not None and outcome.attempt == 2
        total = outcome.rows_in
        # The retry scored only what no chunk had committed: the crashed chunk's rows again, no more.
        assert after == total - committed - 3
        assert before + after - (total - 3) == before - committed < CHUNK
        assert outcome.engine["resumed_rows"] == committed and outcome.engine["rows"] == total - committed
        assert results(store) == reference
        attempts = [m.attempt for m in read_marks(store.ledger, run.run_id)]
        assert attempts == [1, 1, 1] + [2] * -(-(total - committed) // CHUNK)
        (stored,) = store.ledger.shards(run.run_id)
        assert (stored.status, stored.attempts, stored.rows_in, stored.rows_failed) == ("done", 2, total, 3)
        assert len(dead(store, run.run_id)) == 3


@pytest.mark.postgres
def test_a_shard_resumed_without_its_snapshot_says_so_in_lineage(pg_url: str, tiny_model: Model) -> None:
    make_docs(pg_url, ROWS)
    planner = SqlSource(pg_url, "docs", "id", "text")
    plan = planner.plan(shards=1)
    with Shard0(pg_url, planner, plan, tiny_model).store("lost") as store:
        shard0 = Shard0(pg_url, planner, plan, tiny_model)
        run = shard0.start(store, "lost")
        assert shard0.score(store, run, crash_at=450)[0] is None
        planner.close()  # the planning transaction, and its snapshot, end: a new process would see this
        with SqlSource(pg_url, "docs", "id", "text") as fresh:
            outcome, _ = Shard0(pg_url, fresh, plan, tiny_model).score(store, run)
        assert outcome is not None and outcome.snapshot_lost
        snapshots = {row["source_key"] < 2 * CHUNK: row["input_snapshot"] for row in store.read_results()}
        assert snapshots[True] == plan.snapshot  # the chunks committed before the crash
        assert snapshots[False] not in (None, plan.snapshot)  # read at a fresh snapshot, and recorded
        assert store.count_results() == ROWS


def test_chunks_must_end_where_engine_windows_end() -> None:
    assert ChunkConfig().engine_config(None).window_rows == 8192
    assert ChunkConfig(50).engine_config(EngineConfig(window_rows=100)).window_rows == 50
    with pytest.raises(
        ConfigError, match="chunk rows 10000 is not a multiple of the engine's window_rows 8192"
    ):
        ChunkConfig(10_000).engine_config(None)
    with pytest.raises(ConfigError, match="chunk rows must be a positive integer"):
        ChunkConfig(0)
