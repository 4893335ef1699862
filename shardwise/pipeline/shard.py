"""Score one shard: stream its rows through the engine into the results store, chunk by chunk, exactly once.

This is the whole body of an inference task, without the orchestration: the
Prefect task in ``tasks/`` adds retries, logging and artifacts around it.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from shardwise.batch.config import EngineConfig
from shardwise.batch.engine import Engine
from shardwise.batch.stats import BatchStats
from shardwise.cost.budget import Budget, BudgetGuard, Hold
from shardwise.cost.meter import ChunkMeter
from shardwise.cost.prices import Pricing
from shardwise.cost.usage import RunUsage
from shardwise.db.codec import utc_now
from shardwise.model import Loaded
from shardwise.model.counts import count_columns
from shardwise.pipeline.batch_book import LedgerBook
from shardwise.pipeline.chunks import ChunkConfig, InputFingerprints, commit_chunks, progress_after
from shardwise.pipeline.lease import LEASE_S, shard_lease_keeper
from shardwise.pipeline.preemption import refuse_if_draining, until_preempted
from shardwise.pipeline.reporter import ProgressReporter
from shardwise.records import RunRecord, ShardReport
from shardwise.results import ChunkTotals, MergeOutcome, ResultStore, StoredShard
from shardwise.results.owners import owner_of
from shardwise.retry_policy import Outage, RetryPolicy, retry_step
from shardwise.sources.base import ReadFrom, Shard, ShardReader, Source, SourcePlan

_log = logging.getLogger(__name__)

__all__ = ["PROGRESS_EVERY_S", "ShardOutcome", "WorkerInfo", "score_shard", "this_worker"]

PROGRESS_EVERY_S = 1.0
"""Default seconds between an attempt's live progress reports to the ledger."""
_numbers = itertools.count()
_this_thread = threading.local()


@dataclass(frozen=True)
class WorkerInfo:
    """Who scores a shard: the host, and the worker on it (``host:pid/thread@pidns:start``, see
    :mod:`~shardwise.results.owners`), which is also the owner of the leases it takes."""

    host: str
    worker: str


def this_worker() -> WorkerInfo:
    """This process and thread as a worker: threads of one process are numbered in order of first use.

    The number lives with the thread, never with its ident: a thread started after another ended may get
    the same ident, and must not pass as the owner of the leases that ended one took.
    """
    number = getattr(_this_thread, "number", None)
    if number is None:
        number = _this_thread.number = next(_numbers)  # next() on a count is atomic under the GIL
    host = socket.gethostname()
    return WorkerInfo(host, owner_of(host, number))


@dataclass(frozen=True)
class ShardOutcome:
    """What one shard attempt did. ``skipped`` means it was already done: nothing was read or written.

    ``host``, ``device`` and ``worker`` say where it ran; ``wall_s`` is the
    worker's busy time on it, and ``model_load_s`` the part of that spent
    loading the model (0 when the worker had it already). ``engine`` holds
    the engine's figures; its ``counts``, once the shard is merged, are the
    shard's count outputs over all its chunks, whichever attempt scored them.
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

    @property
    def counts(self) -> dict[str, int]:
        """The sums of the model's count outputs (a generator's tokens); empty when it declares none."""
        return {name: int(n) for name, n in dict(self.engine.get("counts") or {}).items()}

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
    model: Loaded,
    store: ResultStore,
    run: RunRecord,
    config: EngineConfig | None = None,
    on_batch: Callable[[BatchStats], None] | None = None,
    model_load_s: float = 0.0,
    progress_every_s: float | None = None,
    lease_s: float = LEASE_S,
    chunking: ChunkConfig | None = None,
    outage: Outage | None = None,
    pricing: Pricing | None = None,
    budget: Budget | None = None,
) -> ShardOutcome:
    """Count an attempt unless the shard is done, then score and commit its rows chunk by chunk.

    The ledger numbers the attempt. Rows stream from the source through the
    engine; every ``chunking.rows`` of them (default
    :data:`~shardwise.pipeline.chunks.DEFAULT_CHUNK_ROWS`) are merged with
    their dead letters and the chunk's mark in one transaction, retried on a
    new connection when the database step fails (see
    :mod:`~shardwise.pipeline.chunks`). The attempt starts after the chunks
    earlier attempts committed, and the shard is marked done, with the sums
    of all its chunks, after its last. Each row's input fingerprint is
    joined back to its result by input position (:class:`InputFingerprints`).
    While the engine runs, the attempt's progress goes to the ledger every
    ``progress_every_s`` seconds (default :data:`PROGRESS_EVERY_S`) from a
    background thread that never holds the scoring up (see
    :mod:`~shardwise.pipeline.reporter`). The worker holds the attempt's
    lease of ``lease_s`` seconds, renewed from another thread until the
    shard is merged (see :mod:`~shardwise.pipeline.lease`).

    Every database step (counting the attempt, opening the source, each
    chunk's steps, the done-mark) is retried on ``outage``, the shard's clock
    (a fresh one with the default :class:`~shardwise.retry_policy.RetryPolicy`
    when None), until its deadline; then
    :class:`~shardwise.errors.RetryDeadlineError` ends the attempt.

    Each chunk records the device time it took and its cost under ``pricing``
    (default: the run's model, a remote one at the price table's prices, a
    local one unpriced); see :mod:`shardwise.cost`. With ``budget``, the
    attempt reserves each chunk against the run's budget in the ledger before
    it scores it (the first, and each after a commit), beside the chunks the
    run's other shards hold, and stops there with
    :class:`~shardwise.errors.BudgetReached` (see :mod:`shardwise.cost.budget`).
    """
    me, device = this_worker(), str(model.device)
    outage = outage or Outage(RetryPolicy())
    refuse_if_draining(shard.shard_id)  # a worker told to stop counts no new attempt
    attempt = retry_step(
        lambda: store.ledger.record_attempt(
            run.run_id, shard.shard_id, host=me.host, device=device, owner=me.worker, lease_s=lease_s
        ),
        what=f"record an attempt at shard {shard.shard_id}",
        outage=outage,
    )
    if attempt is None:
        return ShardOutcome(shard.shard_id, skipped=True, host=me.host, device=device, worker=me.worker)
    started = utc_now()
    chunking = chunking or ChunkConfig()
    engine_config = chunking.engine_config(config)
    with (
        shard_lease_keeper(store.ledger, run.run_id, shard.shard_id, attempt, me.worker, lease_s),
        store.chunk_writer(run, shard.shard_id, attempt, outage) as writer,
    ):
        start = writer.start()
        guard = (
            None
            if budget is None
            else _guard(budget, store, run.run_id, shard.shard_id, attempt, me.worker, outage)
        )
        if guard is not None:
            guard.check(start.chunk)  # before the attempt scores a row
        if start.rows:
            _log.info(
                "shard %d resumes at chunk %d: its first %d rows are committed (last key %r)",
                shard.shard_id, start.chunk, start.rows, start.key,
            )  # fmt: skip
        # A retried or resumed attempt reads only what its shard has not committed.
        with _reader(source, plan, shard, ReadFrom(start.rows, start.key), outage) as reader:
            rows, snapshot, lost = reader.rows, reader.snapshot, reader.snapshot_lost
            write = functools.partial(store.ledger.record_progress, run.run_id, shard.shard_id, attempt)
            every_s = progress_every_s or PROGRESS_EVERY_S
            reporter = ProgressReporter(
                progress_after(write, start), every_s, f"shard-{shard.shard_id}-progress"
            )
            fingerprints = InputFingerprints()
            # A model that submits provider batches records them here, so a resume collects them.
            book = LedgerBook(store.ledger, run.run_id, shard.shard_id, start.rows, outage)
            engine_run = Engine(model, engine_config).run(
                fingerprints.feed(rows),
                on_batch=_chained(_stop_if_draining(shard.shard_id), _chained(reporter.on_batch, on_batch)),
                book=book,
            )
            reporter.follow(engine_run.stats)
            with engine_run, reporter:
                # A worker told to stop (SIGTERM) lets the shard go after the batch in hand (the check
                # above) or at the next row, its chunk in hand uncommitted.
                scored = until_preempted(fingerprints.joined(engine_run), shard.shard_id)
                meter = ChunkMeter(device, pricing or Pricing(run.model_name), count_columns(model.outputs))
                merging = commit_chunks(
                    scored, writer, start, chunking.rows, snapshot if lost else None, meter, guard
                )
        stats = engine_run.stats
        figures = {**stats.as_dict(), "worker": me.worker, "model_load_s": model_load_s}
        figures["resumed_rows"] = start.rows  # committed by earlier attempts: not scored by this one
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
        totals = writer.finish(report) if merging else None
    if totals is None:  # another writer finished the shard: this attempt's own figures
        counts = ChunkTotals(0, report.rows_in, report.rows_out, report.rows_failed, stats.rows_truncated)
        merged = MergeOutcome(committed=False)
    else:
        counts = totals  # all the shard's chunks, as its done-mark records them
        figures = {
            **figures,
            "chunks": totals.chunks,
            "rows_truncated": totals.rows_truncated,
            "counts": dict(totals.counts),
        }
        merged = MergeOutcome(
            True, totals.rows_inserted, totals.rows_updated, totals.rows_unchanged, totals.rows_failed
        )
    return ShardOutcome(
        shard.shard_id,
        skipped=totals is None,
        rows_in=counts.rows_in,
        rows_out=counts.rows_out,
        rows_failed=counts.rows_failed,
        rows_truncated=counts.rows_truncated,
        merge=merged,
        engine=figures,
        wall_s=(report.finished_at - started).total_seconds() + model_load_s,
        snapshot_lost=lost,
        attempt=attempt,
        host=me.host,
        device=device,
        worker=me.worker,
        model_load_s=model_load_s,
    )


def _guard(
    budget: Budget, store: ResultStore, run_id: str, shard_id: int, attempt: int, owner: str, outage: Outage
) -> BudgetGuard:
    """The attempt's guard: it reserves each chunk in the run's ledger, retried on the shard's clock; a
    worker told to stop while it waits for the run's first chunk lets the shard go."""

    def reserve(chunk: int, decide: Callable[[RunUsage, Sequence[Hold]], Hold | None]) -> bool:
        refuse_if_draining(shard_id)
        return retry_step(
            lambda: store.ledger.reserve_chunk(run_id, shard_id, attempt, owner, chunk, decide),
            what=f"reserve chunk {chunk} of shard {shard_id} against the budget",
            outage=outage,
        )

    return BudgetGuard(budget, reserve)


@contextlib.contextmanager
def _reader(
    source: Source, plan: SourcePlan, shard: Shard, start: ReadFrom, outage: Outage
) -> Iterator[ShardReader]:
    """The shard's reader, its opening (a connection, the snapshot) retried on the shard's clock.

    Only the opening: rows already streamed cannot be asked for again, so a
    stream cut mid-read ends the attempt, and the next one reads on after
    the committed chunks.
    """
    with contextlib.ExitStack() as stack:
        yield retry_step(
            lambda: stack.enter_context(source.open_reader(plan, shard, start)),
            what=f"open the source of shard {shard.shard_id}",
            outage=outage,
        )


def _stop_if_draining(shard_id: int) -> Callable[[BatchStats], None]:
    """Called after each batch, in the thread that commits: a draining worker scores no more batches."""

    def check(batch: BatchStats) -> None:
        refuse_if_draining(shard_id)

    return check


def _chained(
    first: Callable[[BatchStats], None], then: Callable[[BatchStats], None] | None
) -> Callable[[BatchStats], None]:
    if then is None:
        return first

    def both(batch: BatchStats) -> None:
        first(batch)
        then(batch)

    return both
