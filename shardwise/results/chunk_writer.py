"""One shard attempt's chunk writer: each chunk merged exactly once, then the shard marked done.

::

    with store.chunk_writer(run, shard_id=3, attempt=1) as writer:
        start = writer.start()                  # after the chunks already committed
        for chunk in chunks_from(start):        # the rows of each chunk, held in memory
            writer.commit(chunk)                # stage, merge, mark: one retried step
        totals = writer.finish(report)          # None: the shard was already done

:meth:`ChunkWriter.commit` stages the chunk in connection-private TEMP tables
(binary ``COPY`` on PostgreSQL), then, in one transaction, locks the shard's
ledger row, returns if the shard is done or the chunk's mark exists, merges
the rows (see :mod:`shardwise.results.merge`), stores the dead letters and
inserts the chunk's mark (:mod:`shardwise.results.chunk_marks`). The chunk
is in memory, so when any of that fails with a
:class:`~shardwise.errors.TransientError` the whole step runs again on a new
connection (:mod:`shardwise.results.db_retry`); nothing is scored again.
:meth:`ChunkWriter.finish` marks the shard done with the sum of all its
chunk marks, in the same way.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import sqlalchemy as sa

from shardwise.closing import Closing
from shardwise.counts import count_columns, counts_of_rows
from shardwise.dberrors import mapped_errors
from shardwise.model import OutputColumn
from shardwise.results import chunk_marks, shard_sql
from shardwise.results.chunk_marks import ChunkMark, ChunkStart, ChunkTotals
from shardwise.results.codec import utc_now
from shardwise.results.connect import write_transaction
from shardwise.results.db_retry import DbRetry, retry_step
from shardwise.results.merge import Lineage, MergeCounts, merge_rows
from shardwise.results.records import DeadLetter, ResultRow, RunRecord, ShardReport
from shardwise.results.schema import stage_table
from shardwise.results.staging import Staging
from shardwise.sources.base import KeyType

__all__ = ["Chunk", "ChunkCommit", "ChunkWriter"]

T = TypeVar("T")


@dataclass(frozen=True)
class Chunk:
    """One chunk of a shard: consecutive rows in input order, scored and held in memory until merged.

    ``rows_in`` counts every row read (scored and dead letters); ``position``
    is where the next chunk starts (``{"rows": ..., "key": ...}``, see
    :class:`~shardwise.results.chunk_marks.ChunkMark`). ``input_snapshot`` is
    the snapshot the rows were read at when it differs from the run's.
    """

    number: int
    rows: Sequence[ResultRow]
    dead: Sequence[DeadLetter]
    rows_truncated: int
    position: Mapping[str, Any]
    input_snapshot: str | None = None

    @property
    def rows_in(self) -> int:
        return len(self.rows) + len(self.dead)


@dataclass(frozen=True, slots=True)
class ChunkCommit:
    """What committing a chunk did.

    ``merged``: this writer merged it. ``already``: its mark existed (an
    earlier try whose commit answer was lost, or another writer), and
    ``stored_position`` is the position recorded then. ``shard_done``: the
    shard is done; nothing more of it may be written.
    """

    status: Literal["merged", "already", "shard_done"]
    counts: MergeCounts | None = None
    stored_position: Mapping[str, Any] | None = None


class ChunkWriter(Closing):
    """Commits one shard attempt's chunks, each exactly once, and marks the shard done after the last.

    The writer keeps one connection between chunks and drops it after any
    failure; its staging tables live and die with it. Not for sharing
    between threads.
    """

    def __init__(
        self,
        engine: sa.Engine,
        results: sa.Table,
        outputs: tuple[OutputColumn, ...],
        key_type: KeyType,
        run: RunRecord,
        shard_id: int,
        attempt: int,
        retry: DbRetry | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._engine, self._results, self._outputs, self._key_type = engine, results, outputs, key_type
        self.run, self.shard_id, self.attempt = run, shard_id, attempt
        self._retry = retry or DbRetry()
        self._sleep = sleep
        self._conn: sa.Connection | None = None

    def close(self) -> None:
        """Drop the staging tables and return the connection; a broken one is discarded instead."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            Staging(conn, stage_table(self._results), self._outputs, self._key_type, "").drop()
        except Exception:
            conn.invalidate()  # unusable (dropped, aborted); its TEMP tables go with it
        finally:
            conn.close()

    def start(self) -> ChunkStart:
        """Where this attempt starts: after the shard's last committed chunk (retried like a commit)."""
        return self._retried(f"read the chunks of shard {self.shard_id}", self._read_start)

    def commit(self, chunk: Chunk) -> ChunkCommit:
        """Stage and merge ``chunk`` and write its mark, once; see the module docstring."""
        return self._retried(
            f"commit chunk {chunk.number} of shard {self.shard_id}", lambda: self._commit_once(chunk)
        )

    def finish(self, report: ShardReport) -> ChunkTotals | None:
        """Mark the shard done with the sum of its chunk marks; None when it was done already.

        ``report``'s own row counts are replaced by those sums, so a shard
        resumed after some chunks records all its rows, whichever attempt
        merged them. Its engine figures are this attempt's, with three of the
        shard's written over them: ``chunks`` (how many were committed),
        ``rows_truncated`` and ``counts`` (the count outputs; both over all chunks).
        """
        return self._retried(f"mark shard {self.shard_id} done", lambda: self._finish_once(report))

    def _retried(self, what: str, step: Callable[[], T]) -> T:
        return retry_step(step, what=what, policy=self._retry, reset=self._discard, sleep=self._sleep)

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.invalidate()
            conn.close()

    def _connection(self, action: str) -> sa.Connection:
        if self._conn is None:
            with mapped_errors(action, self._engine.url):
                self._conn = self._engine.connect()
        return self._conn

    def _read_start(self) -> ChunkStart:
        action = f"read the chunks of shard {self.shard_id}"
        conn = self._connection(action)
        with mapped_errors(action, self._engine.url), conn.begin():
            return chunk_marks.chunk_start(conn, self.run.run_id, self.shard_id)

    def _commit_once(self, chunk: Chunk) -> ChunkCommit:
        what = f"chunk {chunk.number} of shard {self.shard_id}"
        conn = self._connection(f"open staging for {what}")
        staging = Staging(
            conn, stage_table(self._results), self._outputs, self._key_type, self.run.results_table
        )
        with mapped_errors(f"stage {what}", self._engine.url):
            staging.create()  # drops what an earlier chunk staged on this connection
            staging.add_rows(chunk.rows)
            staging.add_dead_letters(chunk.dead)
            staging.drop_duplicates()
            staging.analyze()
        with mapped_errors(f"merge {what}", self._engine.url):
            return self._merge(staging, chunk)

    def _merge(self, staging: Staging, chunk: Chunk) -> ChunkCommit:
        conn, run, now = staging.conn, self.run, utc_now()
        with write_transaction(conn) as tx:
            if shard_sql.lock_shard(conn, run.run_id, self.shard_id) == "done":
                tx.rollback()
                return ChunkCommit("shard_done")
            stored = chunk_marks.chunk_position(conn, run.run_id, self.shard_id, chunk.number)
            if stored is not None:
                tx.rollback()
                return ChunkCommit("already", stored_position=stored)
            lineage = Lineage(
                run.model_name,
                run.model_version,
                run.code_version,
                chunk.input_snapshot or run.source_snapshot,
                run.run_id,
                self.shard_id,
                now,
            )
            counts = merge_rows(conn, self._results, staging.stage, staging.rows, lineage)
            shard_sql.merge_dead_letters(
                conn, run.run_id, self.shard_id, self.attempt, run.results_table, now
            )
            mark = ChunkMark(
                self.shard_id,
                chunk.number,
                self.attempt,
                rows_in=chunk.rows_in,
                rows_out=len(chunk.rows),
                rows_failed=len(chunk.dead),
                rows_truncated=chunk.rows_truncated,
                rows_inserted=counts.inserted,
                rows_updated=counts.updated,
                rows_unchanged=counts.unchanged,
                position=chunk.position,
                counts=counts_of_rows((r.values for r in chunk.rows), count_columns(self._outputs)),
            )
            chunk_marks.insert_mark(conn, run.run_id, mark, now)
        return ChunkCommit("merged", counts)

    def _finish_once(self, report: ShardReport) -> ChunkTotals | None:
        action = f"mark shard {self.shard_id} done"
        conn = self._connection(action)
        run_id = self.run.run_id
        with mapped_errors(action, self._engine.url), write_transaction(conn) as tx:
            if shard_sql.lock_shard(conn, run_id, self.shard_id) == "done":
                tx.rollback()
                return None
            totals = chunk_marks.chunk_totals(conn, run_id, self.shard_id)
            report = dataclasses.replace(
                report,
                attempt=max(report.attempt, self.attempt),
                rows_in=totals.rows_in,
                rows_out=totals.rows_out,
                rows_failed=totals.rows_failed,
                engine={
                    **report.engine,
                    "chunks": totals.chunks,
                    "rows_truncated": totals.rows_truncated,
                    "counts": dict(totals.counts),
                },
            )
            merged = {
                "inserted": totals.rows_inserted,
                "updated": totals.rows_updated,
                "unchanged": totals.rows_unchanged,
            }
            shard_sql.mark_shard_done(conn, run_id, self.shard_id, report, merged)
        return totals
