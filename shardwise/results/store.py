"""The results store: one results table plus the run ledger, on PostgreSQL or SQLite.

The store is the only part of Shardwise that writes results. Its contract is
exactly-once per shard: a shard's rows, its dead letters and its done-mark
commit in one transaction that first checks the shard is not done, so
retries, resumed runs and racing workers change nothing the second time.
A store is safe to share between threads; each shard writer has its own
connection.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, get_args

import sqlalchemy as sa

from shardwise.errors import ConfigError
from shardwise.model import OutputColumn
from shardwise.results import ledger
from shardwise.results.codec import utc_now
from shardwise.results.connect import make_engine, write_transaction
from shardwise.results.dberrors import mapped_errors, safe_url
from shardwise.results.outcomes import RunCounts, RunSummary, StoredDeadLetter
from shardwise.results.records import RunRecord, RunStatus
from shardwise.results.schema import check_layout
from shardwise.results.schema import results_table as results_table_for
from shardwise.results.sqlfiles import query
from shardwise.results.writer import ShardWriter
from shardwise.sources.base import SourcePlan

__all__ = ["ResultStore"]

KeyType = Literal["int", "text"]


class ResultStore:
    """Results table ``results_table`` for a model with ``outputs``, keyed by ``key_type`` source keys."""

    def __init__(
        self, url: str, results_table: str, outputs: tuple[OutputColumn, ...], key_type: KeyType
    ) -> None:
        if key_type not in get_args(KeyType):
            raise ConfigError(f"key_type must be one of {', '.join(get_args(KeyType))}; got {key_type!r}")
        self.results_table = results_table
        self.outputs = tuple(outputs)
        self.key_type: KeyType = key_type
        self.table = results_table_for(results_table, self.outputs, key_type)
        self.engine = make_engine(url)
        self.url = safe_url(url)

    def __repr__(self) -> str:
        return f"ResultStore({self.url!r}, {self.results_table!r})"

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close pooled connections. Open writers keep theirs until they exit."""
        self.engine.dispose()

    @contextmanager
    def _reading(self, action: str) -> Iterator[sa.Connection]:
        with mapped_errors(action, self.engine.url), self.engine.connect() as conn, conn.begin():
            yield conn

    @contextmanager
    def _writing(self, action: str) -> Iterator[sa.Connection]:
        with mapped_errors(action, self.engine.url), self.engine.connect() as conn, write_transaction(conn):
            yield conn

    def ensure_schema(self) -> None:
        """Create the ledger and the results table if missing; check an existing results table's layout.

        Idempotent and safe to run from several processes at once (an advisory
        lock on PostgreSQL, the write lock on SQLite).
        """
        with self._writing("create the results table and ledger") as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(query("postgresql", "schema_lock"))
            ledger.create_ledger(conn)
            if sa.inspect(conn).has_table(self.table.name, schema=self.table.schema):
                check_layout(conn, self.table, self.results_table)
            else:
                conn.execute(sa.schema.CreateTable(self.table, if_not_exists=True))

    def ensure_ledger(self) -> None:
        """Create the ledger tables only; the results table waits until its key type is known."""
        with self._writing("create the ledger") as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(query("postgresql", "schema_lock"))
            ledger.create_ledger(conn)

    def existing_key_type(self) -> KeyType | None:
        """The key type of the results table as it exists in the database, or None if it does not exist."""
        with self._reading("inspect the results table") as conn:
            insp = sa.inspect(conn)
            if not insp.has_table(self.table.name, schema=self.table.schema):
                return None
            columns = {
                c["name"]: c["type"] for c in insp.get_columns(self.table.name, schema=self.table.schema)
            }
        key = columns.get("source_key")
        return "int" if isinstance(key, sa.Integer) else "text" if key is not None else None

    def start_run(self, run: RunRecord, plan: SourcePlan) -> SourcePlan:
        """Record a run and its pending shards, or resume it; returns the plan to execute.

        For a resumed run (a run_id already stored) the returned plan is the
        stored one, not ``plan``: shard boundaries never move under a run.
        """
        if run.results_table != self.results_table:
            raise ConfigError(
                f"run {run.run_id!r} writes to {run.results_table!r} but this store holds "
                f"{self.results_table!r}; open a ResultStore for the run's results table"
            )
        with self._writing(f"start run {run.run_id}") as conn:
            return ledger.start_run(conn, run, plan, utc_now())

    def load_plan(self, run_id: str) -> SourcePlan | None:
        with self._reading(f"load run {run_id}") as conn:
            found = ledger.run_summary(conn, run_id)
        return None if found is None else found[1]

    def load_run(self, run_id: str) -> RunRecord | None:
        summary = self.run_summary(run_id)
        return None if summary is None else summary.record

    def run_summary(self, run_id: str) -> RunSummary | None:
        with self._reading(f"load run {run_id}") as conn:
            found = ledger.run_summary(conn, run_id)
        return None if found is None else found[0]

    def done_shards(self, run_id: str) -> set[int]:
        with self._reading(f"list done shards of run {run_id}") as conn:
            return ledger.done_shards(conn, run_id)

    def shard_writer(self, run: RunRecord, shard_id: int, attempt: int) -> ShardWriter:
        """A writer for one attempt at one shard; use it as a context manager."""
        return ShardWriter(self.engine, self.table, self.outputs, self.key_type, run, shard_id, attempt)

    def record_attempt(
        self, run_id: str, shard_id: int, attempt: int, *, host: str | None = None, device: str | None = None
    ) -> bool:
        """Count an attempt as it starts. False when the shard is already done (or not in the plan)."""
        with self._writing(f"record attempt {attempt} of shard {shard_id}") as conn:
            return ledger.record_attempt(conn, run_id, shard_id, attempt, host, device, utc_now())

    def mark_shard_failed(self, run_id: str, shard_id: int, attempt: int, error: str) -> bool:
        """Mark a shard failed with its last error; a done shard stays done (then returns False)."""
        with self._writing(f"mark shard {shard_id} failed") as conn:
            return ledger.mark_shard_failed(conn, run_id, shard_id, attempt, error, utc_now())

    def finish_run(self, run_id: str, status: RunStatus) -> RunCounts:
        """Close a run as ``completed`` or ``failed``; its counts are summed from the shard ledger."""
        if status not in ("completed", "failed"):
            raise ConfigError(f"a run finishes as 'completed' or 'failed'; got {status!r}")
        with self._writing(f"finish run {run_id}") as conn:
            ledger.finish_run(conn, run_id, status, utc_now())
            found = ledger.run_summary(conn, run_id)
        assert found is not None  # finish_run raised if the run is missing
        return found[0].counts

    def seen_objects(self, source_identity: str) -> frozenset[tuple[str, str]]:
        """(object key, ETag) pairs of Parquet objects that completed runs scored from this source."""
        with self._reading("read seen objects") as conn:
            if not sa.inspect(conn).has_table("shardwise_objects"):
                return frozenset()  # no ledger yet: nothing was seen (and a dry run creates nothing)
            return ledger.seen_objects(conn, source_identity)

    def record_objects(self, run_id: str, source_identity: str, objects: Iterable[tuple[str, str]]) -> None:
        """Remember (object key, ETag) pairs a completed run scored; known pairs are kept as they were."""
        with self._writing(f"record objects of run {run_id}") as conn:
            ledger.record_objects(conn, run_id, source_identity, objects, utc_now())

    def dead_letters(self, run_id: str) -> list[StoredDeadLetter]:
        with self._reading(f"read dead letters of run {run_id}") as conn:
            return ledger.dead_letters(conn, run_id)

    def read_results(
        self, *, model_version: str | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Result rows ordered by key, vectors as float32 arrays; for tests and summaries, not bulk export."""
        stmt = sa.select(self.table).order_by(self.table.c.source_key, self.table.c.model_version)
        if model_version is not None:
            stmt = stmt.where(self.table.c.model_version == model_version)
        with self._reading(f"read {self.results_table}") as conn:
            return [dict(row) for row in conn.execute(stmt.limit(limit)).mappings()]

    def count_results(self, model_version: str | None = None) -> int:
        stmt = sa.select(sa.func.count()).select_from(self.table)
        if model_version is not None:
            stmt = stmt.where(self.table.c.model_version == model_version)
        with self._reading(f"count {self.results_table}") as conn:
            return int(conn.execute(stmt).scalar_one())
