"""One shard attempt's chunk writer: each chunk committed to the sink exactly once, then marked in the
ledger; the shard marked done after its last chunk.

::

    with ChunkWriter(ledger, sink, run, shard_id=3, attempt=1) as writer:
        start = writer.start()                  # after the chunks already committed
        for chunk in chunks_from(start):        # the rows of each chunk, held in memory
            writer.commit(chunk)                # sink commit, then ledger mark
        totals = writer.finish(report)          # None: the shard was already done

:meth:`ChunkWriter.commit` takes three steps, each retried on its own when
it fails with a :class:`~shardwise.errors.TransientError`, until the shard's
retry deadline (:func:`shardwise.retry_policy.retry_step`, on the shard's
:class:`~shardwise.retry_policy.Outage`); the chunk is in memory, so nothing
is scored again:

1. a read of the ledger: a shard already done, or a chunk already marked,
   is not written again;
2. the sink's commit (:class:`~shardwise.sinks.Sink`): the rows and the
   sink's record of the chunk, atomically and once (a chunk whose record
   exists is not written again, and its stored position and counts come back);
3. one ledger transaction that locks the shard's row and inserts the chunk's
   dead letters and mark (:mod:`shardwise.results.chunk_marks`), with the
   counts the sink recorded, and its usage (device time and cost,
   :mod:`shardwise.results.usage_sql`).

The sink's commit is the commit point. A kill between steps 2 and 3 leaves
a chunk the sink holds and the ledger does not mark: the next attempt
starts at that chunk, scores it again, finds its sink commit in step 2 and
writes nothing there, then marks it with this scoring's dead letters.
:meth:`ChunkWriter.finish` seals the shard in the sink
(:meth:`~shardwise.sinks.Sink.seal`: a commit record at the chunk after its
last), then marks it done with the sum of all its chunk marks. A stale
attempt, one that lost its lease and kept scoring, may pass step 1 just
before the shard is done; its sink commit in step 2 then meets the seal
(answered ``sealed``: nothing written), and it stops as for a done shard. A
stale chunk that landed before the seal is marked from the sink's record and
the seal goes after it, so the done-mark counts every row the sink holds.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import sqlalchemy as sa

from shardwise.closing import Closing
from shardwise.cost.usage import ChunkUsage
from shardwise.db.codec import check_key, utc_now
from shardwise.model.counts import count_columns, counts_of_rows
from shardwise.records import DeadLetter, ResultRow, RunRecord, ShardReport
from shardwise.results import chunk_marks, shard_sql, shard_states, usage_sql
from shardwise.results.chunk_marks import ChunkMark, ChunkStart, ChunkTotals
from shardwise.retry_policy import Outage, RetryPolicy, retry_step
from shardwise.sinks.base import Lineage, MergeCounts, Sink, SinkChunk, SinkCommit

if TYPE_CHECKING:
    from shardwise.results.ledger import Ledger

__all__ = ["Chunk", "ChunkCommit", "ChunkWriter"]

T = TypeVar("T")
_log = logging.getLogger(__name__)


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
    usage: ChunkUsage | None = None
    """The device time and cost of scoring it (:mod:`shardwise.cost`), recorded with its mark."""

    @property
    def rows_in(self) -> int:
        return len(self.rows) + len(self.dead)


@dataclass(frozen=True, slots=True)
class ChunkCommit:
    """What committing a chunk did.

    ``merged``: this writer marked it (its sink commit by this writer, or,
    after a kill, by an earlier attempt at the same position). ``already``:
    another writer committed it at ``stored_position`` (the position
    recorded then). ``shard_done``: the shard is done; nothing more of it may
    be written.
    """

    status: Literal["merged", "already", "shard_done"]
    counts: MergeCounts | None = None
    stored_position: Mapping[str, Any] | None = None


class ChunkWriter(Closing):
    """Commits one shard attempt's chunks to ``sink``, each exactly once, marks them in ``ledger``, and
    marks the shard done after the last. Not for sharing between threads."""

    def __init__(
        self,
        ledger: Ledger,
        sink: Sink,
        run: RunRecord,
        shard_id: int,
        attempt: int,
        outage: Outage | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._ledger, self._sink = ledger, sink
        self.run, self.shard_id, self.attempt = run, shard_id, attempt
        self._outage = outage or Outage(RetryPolicy())
        self._sleep = sleep

    def close(self) -> None:
        """Nothing held between steps: each takes a pooled connection of its own."""

    def start(self) -> ChunkStart:
        """Where this attempt starts: after the shard's last chunk the ledger marks."""
        return self._retried(f"read the chunks of shard {self.shard_id}", self._read_start)

    def commit(self, chunk: Chunk) -> ChunkCommit:
        """Commit ``chunk`` to the sink and mark it in the ledger, once; see the module docstring."""
        what = f"chunk {chunk.number} of shard {self.shard_id}"
        seen = self._retried(f"check {what}", lambda: self._seen(chunk.number))
        if seen is not None:
            return seen
        lineage = Lineage(
            self.run.model_name,
            self.run.model_version,
            self.run.code_version,
            chunk.input_snapshot or self.run.source_snapshot,
            self.run.run_id,
            self.shard_id,
            utc_now(),
        )
        piece = SinkChunk(self.run.run_id, self.shard_id, chunk.number, chunk.rows, lineage, chunk.position)
        landed = self._retried(f"commit {what} to {self._sink.target}", lambda: self._sink.commit(piece))
        if landed.status == "sealed":  # another attempt finished the shard meanwhile: nothing was written
            return ChunkCommit("shard_done")
        if dict(landed.position) != dict(chunk.position):
            # Another attempt, reading another snapshot, committed it first. Its rows stand: the
            # chunk is marked as the sink recorded it, and the caller starts again after it.
            other = self._retried(f"mark {what}", lambda: self._mark_theirs(chunk.number, landed))
            return ChunkCommit("already", stored_position=other)
        return self._retried(f"mark {what}", lambda: self._mark(chunk, landed))

    def finish(self, report: ShardReport) -> ChunkTotals | None:
        """Seal the shard in the sink, then mark it done with the sum of its chunk marks; None when it
        was done already.

        ``report``'s own row counts are replaced by those sums, so a shard
        resumed after some chunks records all its rows, whichever attempt
        merged them. Its engine figures are this attempt's, with three of the
        shard's written over them: ``chunks`` (how many were committed),
        ``rows_truncated`` and ``counts`` (the count outputs; both over all chunks).
        """
        self._retried(f"seal shard {self.shard_id} in {self._sink.target}", self._seal)
        return self._retried(f"mark shard {self.shard_id} done", lambda: self._finish_once(report))

    def _retried(self, what: str, step: Callable[[], T]) -> T:
        # Each step takes a pooled connection of its own: nothing to reset between tries.
        return retry_step(step, what=what, outage=self._outage, sleep=self._sleep)

    def _read_start(self) -> ChunkStart:
        with self._ledger.reading(f"read the chunks of shard {self.shard_id}") as conn:
            return chunk_marks.chunk_start(conn, self.run.run_id, self.shard_id)

    def _seen(self, number: int) -> ChunkCommit | None:
        with self._ledger.reading(f"check chunk {number} of shard {self.shard_id}") as conn:
            return self._marked(conn, shard_sql.shard_status(conn, self.run.run_id, self.shard_id), number)

    def _marked(self, conn: sa.Connection, status: str, number: int) -> ChunkCommit | None:
        if status == "done":
            return ChunkCommit("shard_done")
        stored = chunk_marks.chunk_position(conn, self.run.run_id, self.shard_id, number)
        return None if stored is None else ChunkCommit("already", stored_position=stored)

    def _mark(self, chunk: Chunk, landed: SinkCommit) -> ChunkCommit:
        run, now = self.run, utc_now()
        with self._ledger.writing(f"mark chunk {chunk.number} of shard {self.shard_id}") as conn:
            status = shard_sql.lock_shard(conn, run.run_id, self.shard_id)
            seen = self._marked(conn, status, chunk.number)
            if seen is not None:
                return seen
            layout = self._sink.layout
            letters = [
                dataclasses.replace(
                    dl, key=None if dl.key is None else check_key(dl.key, layout.key_type, run.results_table)
                )
                for dl in chunk.dead
            ]
            shard_sql.insert_dead_letters(
                conn, run.run_id, self.shard_id, self.attempt, run.results_table, now, letters
            )
            mark = ChunkMark(
                self.shard_id,
                chunk.number,
                self.attempt,
                rows_in=chunk.rows_in,
                rows_out=len(chunk.rows),
                rows_failed=len(chunk.dead),
                rows_truncated=chunk.rows_truncated,
                rows_inserted=landed.inserted,
                rows_updated=landed.updated,
                rows_unchanged=landed.unchanged,
                position=chunk.position,
                counts=counts_of_rows((r.values for r in chunk.rows), count_columns(layout.outputs)),
            )
            chunk_marks.insert_mark(conn, run.run_id, mark, now)
            if chunk.usage is not None:
                usage_sql.insert_usage(conn, run.run_id, self.shard_id, chunk.number, chunk.usage)
        counts = MergeCounts(landed.inserted, landed.updated, landed.unchanged)
        return ChunkCommit("merged", counts)

    def _mark_theirs(self, number: int, landed: SinkCommit) -> Mapping[str, Any]:
        """Mark a chunk another attempt committed at another position, from the sink's record, unless it
        is marked already; the stored position either way. That attempt's dead letters are not known
        here (it stopped before marking): the mark counts none, and a warning says so."""
        run_id, now = self.run.run_id, utc_now()
        with self._ledger.writing(f"mark chunk {number} of shard {self.shard_id}") as conn:
            status = shard_sql.lock_shard(conn, run_id, self.shard_id)
            seen = self._marked(conn, status, number)
            if seen is not None:
                return seen.stored_position or landed.position
            before = chunk_marks.chunk_start(conn, run_id, self.shard_id).rows
            rows_out = landed.inserted + landed.updated + landed.unchanged
            mark = ChunkMark(
                self.shard_id,
                number,
                self.attempt,
                rows_in=int(landed.position["rows"]) - before,
                rows_out=rows_out,
                rows_failed=0,
                rows_truncated=0,
                rows_inserted=landed.inserted,
                rows_updated=landed.updated,
                rows_unchanged=landed.unchanged,
                position=landed.position,
            )
            chunk_marks.insert_mark(conn, run_id, mark, now)
        _log.warning(
            "chunk %d of shard %d was committed by an attempt that read another snapshot and stopped "
            "before marking it; marked from the sink's record, without that attempt's dead letters",
            number, self.shard_id,
        )  # fmt: skip
        return landed.position

    def _seal(self) -> None:
        """Seal the shard after its last marked chunk; a chunk another attempt committed there first is
        marked from the sink's record, and the seal goes after it."""
        run_id = self.run.run_id
        while True:
            with self._ledger.reading(f"read the chunks of shard {self.shard_id}") as conn:
                if shard_sql.shard_status(conn, run_id, self.shard_id) == "done":
                    return  # whoever marked it done sealed it first
                number = chunk_marks.chunk_start(conn, run_id, self.shard_id).chunk
            landed = self._sink.seal(run_id, self.shard_id, number)
            if landed.status == "sealed":
                return
            self._mark_theirs(number, landed)

    def _finish_once(self, report: ShardReport) -> ChunkTotals | None:
        run_id = self.run.run_id
        with self._ledger.writing(f"mark shard {self.shard_id} done") as conn:
            if shard_sql.lock_shard(conn, run_id, self.shard_id) == "done":
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
            shard_states.mark_done(conn, run_id, self.shard_id, report, merged)
        return totals
