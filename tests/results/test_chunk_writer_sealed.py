"""A stale attempt (its lease taken over, still scoring) cannot add rows to a shard another attempt
finished: the finisher seals the shard in the sink before marking it done, in every sink.

The stale attempt's sink commit is held at a gate, as a slow worker's would be, while the other
attempt finishes the shard; the sink under it is real (SQLite, a Delta table, Parquet files).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from results_helpers import OUTPUTS, attempt_writer, brief, make_plan, make_report, make_run, nth_chunk

from shardwise.results import ChunkCommit, Ledger, ResultStore
from shardwise.sinks import Layout, Sink
from shardwise.sinks.sql.sink import SqlSink

LAYOUT = Layout(OUTPUTS, "int")


def _sql(tmp: Path) -> Sink:
    return SqlSink(f"sqlite:///{tmp / 'results.db'}", "docs_emb", LAYOUT)


def _delta(tmp: Path) -> Sink:
    from shardwise.sinks.delta.sink import DeltaSink

    return DeltaSink(str(tmp / "lake"), "docs_emb", LAYOUT)


def _parquet(tmp: Path) -> Sink:
    from shardwise.sinks.parquet.sink import ParquetSink

    return ParquetSink(str(tmp / "lake"), "docs_emb", LAYOUT)


@pytest.fixture(params=[_sql, _delta, _parquet], ids=["sql", "delta", "parquet"])
def make_sink(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Sink]:
    return lambda: request.param(tmp_path)


class HeldCommits:
    """A sink whose next commit waits at a gate, before it reaches the sink (``before``) or after it
    landed there and before the writer hears of it (``after``): a worker paused mid-commit."""

    def __init__(self, sink: Sink, where: str) -> None:
        self._sink, self._where = sink, where
        self.armed, self.reached, self.gate = False, threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sink, name)

    def commit(self, chunk: Any) -> Any:
        if self.armed and self._where == "before":
            self._wait()
        landed = self._sink.commit(chunk)
        if self.armed and self._where == "after":
            self._wait()
        return landed

    def _wait(self) -> None:
        self.reached.set()
        assert self.gate.wait(60)


@pytest.fixture
def stores(make_sink: Callable[[], Sink], tmp_path: Path) -> Iterator[tuple[ResultStore, ResultStore]]:
    """The stale attempt's store (its sink's commits can be held) and the finisher's: one ledger."""
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    fresh = ResultStore(Ledger(ledger_url), make_sink())
    fresh.ensure_schema()
    stale = ResultStore(Ledger(ledger_url), make_sink())
    yield stale, fresh
    stale.close()
    fresh.close()


def _keys(store: ResultStore) -> list[int]:
    return [int(r["source_key"]) for r in store.sink.read()]


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_stale_attempt_adds_no_rows_the_done_shard_does_not_count(
    stores: tuple[ResultStore, ResultStore], where: str
) -> None:
    """``before``: the stale chunk reaches the sink after the seal and is refused, nothing written.
    ``after``: it landed before the seal, so the finisher marks it and seals after it. Either way the
    shard's done-mark counts exactly the rows the sink holds."""
    stale_store, fresh = stores
    held = HeldCommits(stale_store.sink, where)
    stale_store.sink = held  # type: ignore[assignment]
    run = make_run(table=fresh.sink.target)
    fresh.ledger.start_run(run, make_plan())
    answer: list[ChunkCommit] = []
    with attempt_writer(stale_store, run, 0, 1, brief()) as stale:
        assert stale.commit(nth_chunk(0)).status == "merged"
        assert stale.commit(nth_chunk(1)).status == "merged"
        held.armed = True  # its read goes on past the snapshot the next attempt reads
        late = threading.Thread(target=lambda: answer.append(stale.commit(nth_chunk(2))))
        late.start()
        assert held.reached.wait(60)
        with attempt_writer(fresh, run, 0, 2, brief()) as finisher:  # took the lease over
            assert finisher.start().chunk == 2
            totals = finisher.finish(make_report(attempt=2))
        held.gate.set()
        late.join(60)
    assert answer == [ChunkCommit("shard_done")]
    assert totals is not None
    (shard, _) = fresh.ledger.shards(run.run_id)
    assert shard.status == "done"
    keys = _keys(fresh)
    assert shard.rows_out == len(keys) == totals.rows_out
    assert keys == list(range(20 if where == "before" else 30))
