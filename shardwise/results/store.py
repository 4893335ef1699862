"""The results store: one results table written through the run ledger, on PostgreSQL or SQLite.

The store is the only part of Shardwise that writes results. Its contract is
exactly-once per chunk of a shard: a chunk's rows, its dead letters and its
chunk mark commit in one transaction that first checks the shard is not done
and the chunk not merged, and the shard's done-mark follows its last chunk
(:class:`ChunkWriter`), so retries, resumed runs and racing workers change
nothing the second time. A store is safe to share between threads; each shard writer has its own
connection.
"""

from __future__ import annotations

from typing import Any, get_args

import sqlalchemy as sa

from shardwise.closing import Closing
from shardwise.errors import ConfigError
from shardwise.model import OutputColumn
from shardwise.results.chunk_writer import ChunkWriter
from shardwise.results.db_retry import DbRetry
from shardwise.results.ledger import Ledger
from shardwise.results.records import RunRecord
from shardwise.results.schema import check_layout, parse_table_name
from shardwise.results.schema import results_table as results_table_for
from shardwise.sources.base import KeyType

__all__ = ["ResultStore", "existing_key_type"]


def existing_key_type(ledger: Ledger, results_table: str) -> KeyType | None:
    """The key type of ``results_table`` as it exists in the ledger's database; None if it does not exist."""
    schema, name = parse_table_name(results_table)
    with ledger.reading("inspect the results table") as conn:
        insp = sa.inspect(conn)
        if not insp.has_table(name, schema=schema):
            return None
        columns = {c["name"]: c["type"] for c in insp.get_columns(name, schema=schema)}
    key = columns.get("source_key")
    return "int" if isinstance(key, sa.Integer) else "text" if key is not None else None


class ResultStore(Closing):
    """Results table ``results_table`` for a model with ``outputs``, keyed by ``key_type`` source keys.

    It writes through ``ledger`` (and so into the ledger's database), and owns
    it: closing the store closes the ledger.
    """

    def __init__(
        self, ledger: Ledger, results_table: str, outputs: tuple[OutputColumn, ...], key_type: KeyType
    ) -> None:
        if key_type not in get_args(KeyType):
            raise ConfigError(f"key_type must be one of {', '.join(get_args(KeyType))}; got {key_type!r}")
        self.ledger = ledger
        self.results_table = results_table
        self.outputs = tuple(outputs)
        self.key_type: KeyType = key_type
        self.table = results_table_for(results_table, self.outputs, key_type)

    def __repr__(self) -> str:
        return f"ResultStore({self.ledger.url!r}, {self.results_table!r})"

    @property
    def url(self) -> str:
        """The database URL, password hidden."""
        return self.ledger.url

    def close(self) -> None:
        """Close the ledger's pooled connections. Open writers keep theirs until they exit."""
        self.ledger.close()

    def check_schema(self) -> None:
        """Refuse an existing results table of another layout, as :meth:`ensure_schema` would; create none."""
        with self.ledger.reading("inspect the results table") as conn:
            if sa.inspect(conn).has_table(self.table.name, schema=self.table.schema):
                check_layout(conn, self.table, self.results_table)

    def ensure_schema(self) -> None:
        """Create the ledger and the results table if missing; check an existing results table's layout.

        Idempotent and safe to run from several processes at once (an advisory
        lock on PostgreSQL, the write lock on SQLite).
        """
        with self.ledger.writing("create the results table and ledger") as conn:
            self.ledger.ensure(conn)
            if sa.inspect(conn).has_table(self.table.name, schema=self.table.schema):
                check_layout(conn, self.table, self.results_table)
            else:
                conn.execute(sa.schema.CreateTable(self.table, if_not_exists=True))

    def chunk_writer(
        self, run: RunRecord, shard_id: int, attempt: int, retry: DbRetry | None = None
    ) -> ChunkWriter:
        """A writer that commits one attempt at one shard chunk by chunk; use it as a context manager.

        ``retry`` says how often a chunk's database step is tried on a new
        connection before the attempt fails (see :mod:`shardwise.results.db_retry`).
        """
        self._check_run(run)
        return ChunkWriter(
            self.ledger.engine, self.table, self.outputs, self.key_type, run, shard_id, attempt, retry
        )

    def _check_run(self, run: RunRecord) -> None:
        if run.results_table != self.results_table:
            raise ConfigError(
                f"run {run.run_id!r} writes to {run.results_table!r} but this store holds "
                f"{self.results_table!r}; open a ResultStore for the run's results table"
            )

    def read_results(
        self, *, model_version: str | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Result rows ordered by key, vectors as float32 arrays; for tests and summaries, not bulk export."""
        stmt = sa.select(self.table).order_by(self.table.c.source_key, self.table.c.model_version)
        if model_version is not None:
            stmt = stmt.where(self.table.c.model_version == model_version)
        with self.ledger.reading(f"read {self.results_table}") as conn:
            return [dict(row) for row in conn.execute(stmt.limit(limit)).mappings()]

    def count_results(self, model_version: str | None = None) -> int:
        stmt = sa.select(sa.func.count()).select_from(self.table)
        if model_version is not None:
            stmt = stmt.where(self.table.c.model_version == model_version)
        with self.ledger.reading(f"count {self.results_table}") as conn:
            return int(conn.execute(stmt).scalar_one())
