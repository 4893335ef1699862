"""Score one shard: stream its rows through the engine into the results store, exactly once.

This is the whole body of an inference task, without the orchestration: the
Prefect task in ``tasks/`` adds retries, logging and artifacts around it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from shardwise.config import EngineConfig
from shardwise.engine import Engine, RowResult
from shardwise.lineage import value_fingerprint
from shardwise.model import Model
from shardwise.pipeline.reporter import ProgressReporter
from shardwise.results import (
    DeadLetter,
    MergeOutcome,
    ResultRow,
    ResultStore,
    RunRecord,
    ShardReport,
    StoredShard,
)
from shardwise.results.codec import utc_now
from shardwise.sources.base import Shard, Source, SourcePlan, SourceRow
from shardwise.stats import BatchStats

__all__ = ["PROGRESS_EVERY_S", "ShardOutcome", "WorkerInfo", "score_shard", "this_worker"]

_FLUSH_ROWS = 2000
PROGRESS_EVERY_S = 1.0
"""Default seconds between an attempt's live progress reports to the ledger."""
_threads: dict[int, int] = {}
_threads_lock = threading.Lock()


@dataclass(frozen=True)
class WorkerInfo:
    """Who scores a shard: the host, and the worker on it (``host:pid/thread``)."""

    host: str
    worker: str


def this_worker() -> WorkerInfo:
    """This process and thread as a worker: threads of one process are numbered in order of first use."""
    ident = threading.get_ident()
    with _threads_lock:
        number = _threads.setdefault(ident, len(_threads))
    host = socket.gethostname()
    return WorkerInfo(host, f"{host}:{os.getpid()}/{number}")


@dataclass(frozen=True)
class ShardOutcome:
    """What one shard attempt did. ``skipped`` means it was already done: nothing was read or written.

    ``host``, ``device`` and ``worker`` say where it ran; ``wall_s`` is the
    worker's busy time on it, and ``model_load_s`` the part of that spent
    loading the model (0 when the worker had it already).
    """

    shard_id: int
    skipped: bool
    rows_in: int = 0
    rows_out: int = 0
    rows_failed: int = 0
    rows_truncated: int = 0
    merge: MergeOutcome | None = None
    engine: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    snapshot_lost: bool = False
    attempt: int = 0
    host: str = ""
    device: str = ""
    worker: str = ""
    model_load_s: float = 0.0

    @classmethod
    def from_ledger(cls, stored: StoredShard) -> ShardOutcome:
        """A done shard as the ledger recorded it: for workers whose return value does not come back."""
        engine = dict(stored.engine)
        wall = (
            (stored.finished_at - stored.started_at).total_seconds()
            if stored.started_at and stored.finished_at
            else 0.0
        )
        model_load_s = float(engine.get("model_load_s", 0.0))
        merge = MergeOutcome(
            True,
            stored.rows_inserted or 0,
            stored.rows_updated or 0,
            stored.rows_unchanged or 0,
            stored.rows_failed or 0,
        )
        return cls(
            stored.shard_id,
            skipped=False,
            rows_in=stored.rows_in or 0,
            rows_out=stored.rows_out or 0,
            rows_failed=stored.rows_failed or 0,
            rows_truncated=int(engine.get("rows_truncated", 0)),
            merge=merge,
            engine=engine,
            wall_s=wall + model_load_s,
            attempt=stored.attempts,
            host=stored.host or "",
            device=stored.device or "",
            worker=str(engine.get("worker", "")),
            model_load_s=model_load_s,
        )


def score_shard(
    *,
    source: Source,
    plan: SourcePlan,
    shard: Shard,
    model: Model,
    store: ResultStore,
    run: RunRecord,
    config: EngineConfig | None = None,
    on_batch: Callable[[BatchStats], None] | None = None,
    model_load_s: float = 0.0,
    progress_every_s: float | None = None,
) -> ShardOutcome:
    """Count an attempt unless the shard is done, score its rows, merge them and the dead letters at once.

    The ledger numbers the attempt. Rows stream from the source through the
    engine into the store's staging area in chunks, so memory stays flat in
    the shard's size. Each row's input fingerprint travels with its key
    through the engine. While the engine runs, the attempt's progress goes to
    the ledger every ``progress_every_s`` seconds (default
    :data:`PROGRESS_EVERY_S`) from a background thread that never holds the
    scoring up (see :mod:`~shardwise.pipeline.reporter`).
    """
    me, device = this_worker(), str(model.device)
    attempt = store.ledger.record_attempt(run.run_id, shard.shard_id, host=me.host, device=device)
    if attempt is None:
        return ShardOutcome(shard.shard_id, skipped=True, host=me.host, device=device, worker=me.worker)
    started = utc_now()
    with (
        _open_rows(source, plan, shard) as (rows, snapshot, lost),
        store.shard_writer(run, shard.shard_id, attempt) as writer,
    ):
        write = functools.partial(store.ledger.record_progress, run.run_id, shard.shard_id, attempt)
        reporter = ProgressReporter(
            write, progress_every_s or PROGRESS_EVERY_S, f"shard-{shard.shard_id}-progress"
        )
        engine_run = Engine(model, config).run(_keyed(rows), on_batch=_chained(reporter.on_batch, on_batch))
        reporter.follow(engine_run.stats)
        with engine_run, reporter:
            for scored, failed in _chunks(engine_run):
                writer.add(scored)
                writer.dead_letter(failed)
        stats = engine_run.stats
        figures = {**stats.as_dict(), "worker": me.worker, "model_load_s": model_load_s}
        report = ShardReport(
            attempt=attempt,
            rows_in=stats.rows,
            rows_out=stats.rows - stats.rows_failed,
            rows_failed=stats.rows_failed,
            started_at=started,
            finished_at=utc_now(),
            host=me.host,
            device=device,
            engine=figures,
            input_snapshot=snapshot if lost else None,
        )
        outcome = writer.commit(report)
    return ShardOutcome(
        shard.shard_id,
        skipped=not outcome,
        rows_in=report.rows_in,
        rows_out=report.rows_out,
        rows_failed=report.rows_failed,
        rows_truncated=stats.rows_truncated,
        merge=outcome,
        engine=figures,
        wall_s=(report.finished_at - started).total_seconds() + model_load_s,
        snapshot_lost=lost,
        attempt=attempt,
        host=me.host,
        device=device,
        worker=me.worker,
        model_load_s=model_load_s,
    )


@contextlib.contextmanager
def _open_rows(
    source: Source, plan: SourcePlan, shard: Shard
) -> Iterator[tuple[Iterator[SourceRow], str | None, bool]]:
    """The shard's rows, and the snapshot they come from when the source can say (SQL sources)."""
    open_reader = getattr(source, "open_reader", None)
    if open_reader is None:
        rows = source.read(plan, shard)
        try:
            yield iter(rows), plan.snapshot, False
        finally:
            close = getattr(rows, "close", None)
            if close is not None:
                close()
        return
    with open_reader(plan, shard) as reader:
        yield reader.rows, reader.snapshot, reader.snapshot_lost


def _chained(
    first: Callable[[BatchStats], None], then: Callable[[BatchStats], None] | None
) -> Callable[[BatchStats], None]:
    if then is None:
        return first

    def both(batch: BatchStats) -> None:
        first(batch)
        then(batch)

    return both


def _keyed(rows: Iterator[SourceRow]) -> Iterator[tuple[tuple[Any, str | None], Any]]:
    """Carry each row's input fingerprint through the engine inside its key."""
    for row in rows:
        yield (row.key, value_fingerprint(row.value)), row.value


def _chunks(results: Iterable[RowResult]) -> Iterator[tuple[list[ResultRow], list[DeadLetter]]]:
    scored: list[ResultRow] = []
    failed: list[DeadLetter] = []
    for result in results:
        key, fingerprint = cast(tuple[Any, "str | None"], result.key)
        if result.ok:
            assert result.values is not None
            scored.append(ResultRow(key, result.values, fingerprint or "", result.truncated))
        else:
            error = result.error
            failed.append(DeadLetter(key, type(error).__name__, str(error), fingerprint))
        if len(scored) + len(failed) >= _FLUSH_ROWS:
            yield scored, failed
            scored, failed = [], []
    if scored or failed:
        yield scored, failed
