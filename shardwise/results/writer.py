"""One shard attempt's writer: stage rows as they come, then merge them exactly once.

::

    with store.shard_writer(run, shard_id=3, attempt=1) as writer:
        for batch in scored_batches:
            writer.add(batch.rows)
            writer.dead_letter(batch.failed)
        outcome = writer.commit(report)   # falsy: the shard was already done

The writer holds one connection for its life; its staging tables are private
to that connection. Leaving the block without ``commit`` (an exception, or
simply not calling it) drops the staging tables and changes nothing else.
A writer whose ``add`` failed part-way refuses further calls: retry the shard
with a new writer (the next attempt), which starts from empty staging.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from types import TracebackType
from typing import Literal

import sqlalchemy as sa

from shardwise.dberrors import mapped_errors
from shardwise.errors import ConfigError
from shardwise.model import OutputColumn
from shardwise.results import ledger_sql
from shardwise.results.codec import utc_now
from shardwise.results.connect import write_transaction
from shardwise.results.merge import Lineage, merge_rows
from shardwise.results.outcomes import MergeOutcome
from shardwise.results.records import DeadLetter, ResultRow, RunRecord, ShardReport
from shardwise.results.schema import stage_table
from shardwise.results.staging import Staging
from shardwise.sources.base import KeyType

__all__ = ["ShardWriter"]

_State = Literal["new", "open", "broken", "committed", "closed"]


class ShardWriter:
    """Stages one shard's rows and dead letters, and merges them in one transaction on :meth:`commit`."""

    def __init__(
        self,
        engine: sa.Engine,
        results: sa.Table,
        outputs: tuple[OutputColumn, ...],
        key_type: KeyType,
        run: RunRecord,
        shard_id: int,
        attempt: int,
    ) -> None:
        self._engine = engine
        self._results = results
        self._outputs = outputs
        self._key_type = key_type
        self.run = run
        self.shard_id = shard_id
        self.attempt = attempt
        self._state: _State = "new"
        self._conn: sa.Connection | None = None
        self._staging: Staging | None = None

    def __enter__(self) -> ShardWriter:
        if self._state != "new":
            raise ConfigError(f"a ShardWriter is entered once; this one is {self._state}. Make a new one")
        with mapped_errors(f"open staging for shard {self.shard_id}", self._engine.url):
            conn = self._engine.connect()
            staging = Staging(
                conn, stage_table(self._results), self._outputs, self._key_type, self.run.results_table
            )
            try:
                staging.create()
            except BaseException:
                conn.invalidate()
                conn.close()
                raise
        self._conn, self._staging = conn, staging
        self._state = "open"
        return self

    def _ready(self, verb: str) -> Staging:
        if self._state != "open" or self._staging is None:
            raise ConfigError(
                f"cannot {verb} shard {self.shard_id}: its writer is {self._state}; "
                "use it inside a with block, before commit, and retry a failed shard with a new writer"
            )
        return self._staging

    def add(self, rows: Sequence[ResultRow]) -> None:
        """Stage scored rows; they reach the results table only when :meth:`commit` succeeds."""
        staging = self._ready("add rows to")
        try:
            with mapped_errors(f"stage rows of shard {self.shard_id}", self._engine.url):
                staging.add_rows(rows)
        except BaseException:
            self._state = "broken"
            raise

    def dead_letter(self, rows: Sequence[DeadLetter]) -> None:
        """Stage rows that could not be scored; they are stored with the merge, once."""
        staging = self._ready("add dead letters to")
        try:
            with mapped_errors(f"stage dead letters of shard {self.shard_id}", self._engine.url):
                staging.add_dead_letters(rows)
        except BaseException:
            self._state = "broken"
            raise

    def commit(self, report: ShardReport) -> MergeOutcome:
        """Merge the shard unless it is already done; see :mod:`shardwise.results.merge` for the rule.

        One transaction: lock the shard's ledger row, return a falsy outcome if
        it is done, else merge the rows, store the dead letters and mark the
        shard done with ``report``.
        """
        staging = self._ready("commit")
        self._state = "broken"  # until the transaction below commits
        with mapped_errors(f"merge shard {self.shard_id}", self._engine.url):
            staging.drop_duplicates()
            staging.analyze()
            outcome = self._merge(staging, report)
        self._state = "committed"
        return outcome

    def _merge(self, staging: Staging, report: ShardReport) -> MergeOutcome:
        conn, run, now = staging.conn, self.run, utc_now()
        with write_transaction(conn) as tx:
            if ledger_sql.lock_shard(conn, run.run_id, self.shard_id) == "done":
                tx.rollback()
                return MergeOutcome(committed=False)
            lineage = Lineage(
                run.model_name,
                run.model_version,
                run.code_version,
                report.input_snapshot or run.source_snapshot,
                run.run_id,
                self.shard_id,
                now,
            )
            counts = merge_rows(conn, self._results, staging.stage, staging.rows, lineage)
            ledger_sql.merge_dead_letters(
                conn, run.run_id, self.shard_id, self.attempt, run.results_table, now
            )
            report = dataclasses.replace(report, attempt=max(report.attempt, self.attempt))
            ledger_sql.mark_shard_done(conn, run.run_id, self.shard_id, report, dataclasses.asdict(counts))
        return MergeOutcome(True, counts.inserted, counts.updated, counts.unchanged, staging.dead)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        conn, self._conn, self._state = self._conn, None, "closed"
        if conn is None:
            return
        try:
            if self._staging is not None:
                self._staging.drop()
        except Exception:
            # The session is unusable (dropped connection, aborted COPY); discarding it
            # discards its TEMP tables with it.
            conn.invalidate()
        finally:
            conn.close()
