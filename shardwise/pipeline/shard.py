"""Score one shard: stream its rows through the engine into the results store, exactly once.

This is the whole body of an inference task, without the orchestration: the
Prefect task in ``tasks/`` adds retries, logging and artifacts around it.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from shardwise.config import EngineConfig
from shardwise.engine import Engine, RowResult
from shardwise.lineage import value_fingerprint
from shardwise.model import Model
from shardwise.results import DeadLetter, MergeOutcome, ResultRow, ResultStore, RunRecord, ShardReport
from shardwise.results.codec import utc_now
from shardwise.sources.base import Shard, Source, SourcePlan, SourceRow
from shardwise.stats import BatchStats

__all__ = ["ShardOutcome", "score_shard"]

_FLUSH_ROWS = 2000


@dataclass(frozen=True)
class ShardOutcome:
    """What one shard attempt did. ``skipped`` means it was already done: nothing was read or written."""

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


def score_shard(
    *,
    source: Source,
    plan: SourcePlan,
    shard: Shard,
    model: Model,
    store: ResultStore,
    run: RunRecord,
    attempt: int,
    config: EngineConfig | None = None,
    on_batch: Callable[[BatchStats], None] | None = None,
) -> ShardOutcome:
    """Check the shard is not done, score its rows, and merge them with its dead letters in one commit.

    Rows stream from the source through the engine into the store's staging
    area in chunks, so memory stays flat in the shard's size. Each row's input
    fingerprint travels with its key through the engine.
    """
    if not store.record_attempt(run.run_id, shard.shard_id, attempt, host=_host(), device=str(model.device)):
        return ShardOutcome(shard.shard_id, skipped=True)
    started = utc_now()
    with (
        _open_rows(source, plan, shard) as (rows, snapshot, lost),
        store.shard_writer(run, shard.shard_id, attempt) as writer,
    ):
        engine_run = Engine(model, config).run(_keyed(rows), on_batch=on_batch)
        with engine_run:
            for scored, failed in _chunks(engine_run):
                writer.add(scored)
                writer.dead_letter(failed)
        stats = engine_run.stats
        report = ShardReport(
            attempt=attempt,
            rows_in=stats.rows,
            rows_out=stats.rows - stats.rows_failed,
            rows_failed=stats.rows_failed,
            started_at=started,
            finished_at=utc_now(),
            host=_host(),
            device=str(model.device),
            engine=stats.as_dict(),
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
        engine=stats.as_dict(),
        wall_s=(report.finished_at - started).total_seconds(),
        snapshot_lost=lost,
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


def _host() -> str:
    return socket.gethostname()
