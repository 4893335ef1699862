"""Builders for runs, plans, rows and reports used by the results-store tests."""

from __future__ import annotations

import sqlite3
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Literal

import numpy as np
import sqlalchemy as sa

from shardwise.model import OutputColumn
from shardwise.records import DeadLetter, ResultRow, RunRecord, ShardReport
from shardwise.results import Chunk, ChunkStart, ChunkWriter, MergeOutcome, ResultStore
from shardwise.retry_policy import Outage, RetryPolicy
from shardwise.sources.base import Key, Shard, SourcePlan

DIM = 8
OUTPUTS = (
    OutputColumn("embedding", "vector", DIM),
    OutputColumn("score", "float"),
    OutputColumn("label_id", "int"),
    OutputColumn("label", "text"),
)
TABLE = "docs_emb"


def brief(deadline_s: float = 5.0) -> Outage:
    """A fresh shard clock whose chunk steps retry every 0.05 to 0.2 s, for ``deadline_s``: what most
    chunk-writer tests use."""
    return Outage(RetryPolicy(deadline_s=deadline_s, backoff_s=0.05, backoff_cap_s=0.2))


def make_store(
    url: str,
    table: str = TABLE,
    key_type: Literal["int", "text"] = "int",
    outputs: tuple[OutputColumn, ...] = OUTPUTS,
) -> ResultStore:
    return ResultStore.sql(url, table, outputs, key_type)


def started_run(url: str, *, running: tuple[int, ...] = ()) -> RunRecord:
    """Create the ledger in ``url`` and start ``run-1`` on a two-shard plan; count a first attempt at
    each shard in ``running``."""
    with make_store(url) as store:
        store.ensure_schema()
        run = make_run()
        store.ledger.start_run(run, make_plan())
        for shard_id in running:
            store.ledger.record_attempt(run.run_id, shard_id)
    return run


def impatient_store(sqlite_url: str, busy_ms: int) -> ResultStore:
    """A store whose connections wait only ``busy_ms`` for SQLite's write lock.

    The listener runs after the store's own connect hook, so this short timeout wins.
    """
    store = make_store(sqlite_url)
    pragma = f"PRAGMA busy_timeout = {int(busy_ms)}"
    for engine in (store.ledger.engine, store.sink.engine):  # type: ignore[attr-defined]
        sa.event.listen(engine, "connect", lambda dbapi, _rec: dbapi.execute(pragma))
    return store


@contextmanager
def write_lock_held(sqlite_url: str, release_after_s: float | None = None) -> Iterator[None]:
    """Another connection holds SQLite's write lock (``BEGIN IMMEDIATE``) for the block, or for
    ``release_after_s`` seconds from its start when given."""
    blocker = sqlite3.connect(
        sqlite_url.removeprefix("sqlite:///"), isolation_level=None, check_same_thread=False
    )
    blocker.execute("BEGIN IMMEDIATE")
    timer = None
    if release_after_s is not None:
        timer = threading.Timer(release_after_s, blocker.execute, args=("ROLLBACK",))
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.join()
        else:
            blocker.execute("ROLLBACK")
        blocker.close()


@contextmanager
def locked_out(sqlite_url: str, busy_ms: int) -> Iterator[ResultStore]:
    """A store that waits only ``busy_ms`` for SQLite's write lock, while another connection holds it."""
    with impatient_store(sqlite_url, busy_ms) as store, write_lock_held(sqlite_url):
        yield store


def make_run(run_id: str = "run-1", model_version: str = "mv-1", table: str = TABLE, **kw: str) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        started_by=kw.get("started_by", "cli"),
        parameters={"shards": 2, "note": "test"},
        model_name="tiny",
        model_version=model_version,
        code_version="code-1",
        source_identity="postgresql://root@127.0.0.1/src#public.docs",
        source_snapshot="snap-1",
        results_table=table,
    )


def make_plan(shards: int = 2, rows: int = 10) -> SourcePlan:
    cuts = [
        Shard(i, rows, {"lo": i * rows if i else None, "hi": (i + 1) * rows if i < shards - 1 else None})
        for i in range(shards)
    ]
    return SourcePlan(
        "sql", "postgresql://root@127.0.0.1/src#public.docs", "snap-1", tuple(cuts), {"shards": shards}
    )


def vector(key: Key, salt: str = "") -> np.ndarray:
    seed = zlib.crc32(f"{key!r}/{salt}".encode())
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)


def make_rows(keys: Iterable[Key], fp_salt: str = "") -> list[ResultRow]:
    """Deterministic rows: the same keys and salt give the same vectors and fingerprints."""
    return [
        ResultRow(
            key=k,
            values={"embedding": vector(k, fp_salt), "score": 0.5, "label_id": 7, "label": f"label {k}"},
            input_fingerprint=f"fp-{k}{fp_salt}",
            truncated=k == 3,
        )
        for k in keys
    ]


def make_report(attempt: int = 1, rows: int = 10, failed: int = 0) -> ShardReport:
    now = datetime.now(timezone.utc)
    engine = {"padding_efficiency": 0.8, "tokens_per_s": 1234.5, "oom_splits": 1}
    return ShardReport(attempt, rows + failed, rows, failed, now, now, "host-a", "cpu", engine)


def whole_chunk(
    rows: Sequence[ResultRow], dead: Sequence[DeadLetter] = (), after: ChunkStart | None = None
) -> Chunk:
    """A shard's rows and dead letters as one chunk, the next after ``after`` (the first by default)."""
    after = after or ChunkStart()
    last = dead[-1].key if dead else rows[-1].key if rows else None
    position = {"rows": after.rows + len(rows) + len(dead), "key": last}
    return Chunk(after.chunk, rows, dead, sum(r.truncated for r in rows), position)


def nth_chunk(number: int, per: int = 10, salt: str = "", dead: int = 0) -> Chunk:
    """Chunk ``number``: keys ``number*per ..`` scored, then ``dead`` dead letters keyed above 1000."""
    keys = range(number * per, (number + 1) * per)
    letters = [DeadLetter(1000 + number * per + i, "InputError", "empty") for i in range(dead)]
    last = letters[-1].key if letters else keys[-1]
    position = {"rows": (number + 1) * (per + dead), "key": last}
    return Chunk(number, make_rows(keys, fp_salt=salt), letters, int(3 in keys), position)


def attempt_writer(
    store: ResultStore, run: RunRecord, shard_id: int, attempt: int, outage: Outage | None = None
) -> ChunkWriter:
    """The chunk writer of the shard's ``attempt``-th attempt, counted in the ledger first (the shard is
    then running), as :func:`~shardwise.pipeline.score_shard` does; a done shard is left done."""
    for _ in range(attempt):
        counted = store.ledger.record_attempt(run.run_id, shard_id)
        if counted is None or counted >= attempt:
            break
    return store.chunk_writer(run, shard_id, attempt, outage)


def write_shard(
    store: ResultStore,
    run: RunRecord,
    shard_id: int,
    rows: Sequence[ResultRow],
    *,
    attempt: int = 1,
    dead: Sequence[DeadLetter] = (),
) -> MergeOutcome:
    """Write a whole shard as one chunk, then mark it done, as the pipeline does; falsy if it was done."""
    with attempt_writer(store, run, shard_id, attempt) as writer:
        done = writer.commit(whole_chunk(rows, dead, writer.start()))
        if done.status != "merged" or writer.finish(make_report(attempt, len(rows), len(dead))) is None:
            return MergeOutcome(committed=False)
        assert done.counts is not None
        counts = done.counts
        return MergeOutcome(True, counts.inserted, counts.updated, counts.unchanged, len(dead))


def snapshot(store: ResultStore) -> list[tuple[object, ...]]:
    """The results table as comparable tuples (vectors as bytes)."""
    out = []
    for row in store.read_results():
        out.append(tuple(v.tobytes() if isinstance(v, np.ndarray) else v for v in row.values()))
    return out
