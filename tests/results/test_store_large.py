"""A large shard commits chunk by chunk through staging, in flat memory (PostgreSQL COPY); prints timing."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest
from results_helpers import attempt_writer, make_report, make_run, whole_chunk

from shardwise.model import OutputColumn
from shardwise.records import ResultRow
from shardwise.results import ChunkStart, ResultStore
from shardwise.sources.base import Shard, SourcePlan

ROWS, DIM, CHUNK = 50_000, 384, 1_000


def _chunks() -> Iterator[list[ResultRow]]:
    rng = np.random.default_rng(3)
    for start in range(0, ROWS, CHUNK):
        vectors = rng.standard_normal((CHUNK, DIM), dtype=np.float32)
        yield [ResultRow(start + i, {"embedding": vectors[i]}, f"fp{start + i}") for i in range(CHUNK)]


@pytest.mark.postgres
def test_fifty_thousand_384d_rows_merge_in_flat_memory(pg_url: str) -> None:
    outputs = (OutputColumn("embedding", "vector", DIM),)
    with ResultStore.sql(pg_url, "big", outputs, "int") as store:
        store.ensure_schema()
        run = make_run(table="big")
        store.ledger.start_run(
            run, SourcePlan("sql", "src", None, (Shard(0, ROWS, {"lo": None, "hi": None}),))
        )
        tracemalloc.start()
        t0 = time.perf_counter()
        inserted = 0
        with attempt_writer(store, run, 0, 1) as writer:
            start = writer.start()
            for rows in _chunks():
                chunk = whole_chunk(rows, after=start)
                done = writer.commit(chunk)
                assert done.status == "merged" and done.counts is not None
                inserted += done.counts.inserted
                start = ChunkStart(chunk.number + 1, int(chunk.position["rows"]), rows[-1].key)
            t1 = time.perf_counter()
            assert writer.finish(make_report(rows=ROWS)) is not None
        t2 = time.perf_counter()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        total_mb = ROWS * DIM * 4 / 2**20
        print(
            f"\n{ROWS} rows x {DIM}-d ({total_mb:.0f} MiB of float32): {ROWS // CHUNK} chunks staged and "
            f"merged {t1 - t0:.1f}s, done-mark {t2 - t1:.1f}s, Python peak {peak / 2**20:.1f} MiB"
        )
        assert inserted == ROWS
        assert store.count_results() == ROWS
        assert peak < 40 * 2**20, "staging must stream, not hold the shard"
        last = store.read_results(limit=None)[-1]
        assert last["source_key"] == ROWS - 1 and last["embedding"].shape == (DIM,)
