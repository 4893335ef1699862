"""A run's two stores together: the ledger (runs, shards, chunk marks, dead letters) and the sink that
holds its results, which may be in different places (``--ledger``, ``--results``).

The exactly-once contract is per chunk of a shard: the sink commits a chunk's
rows once (its own commit record), then the ledger marks the chunk, and the
shard's done-mark follows its last chunk (:class:`ChunkWriter`), so retries,
resumed runs and racing workers change nothing the second time.
"""

from __future__ import annotations

from typing import Any

from shardwise.closing import Closing
from shardwise.errors import ConfigError
from shardwise.model import OutputColumn
from shardwise.records import RunRecord
from shardwise.results.chunk_writer import ChunkWriter
from shardwise.results.ledger import Ledger
from shardwise.retry_policy import Outage
from shardwise.secrets.by_reference import same_location
from shardwise.sinks.base import Layout, Sink
from shardwise.sources.base import KeyType

__all__ = ["ResultStore"]


class ResultStore(Closing):
    """The ``ledger`` a run is recorded in and the ``sink`` its results go to; closing closes both."""

    def __init__(self, ledger: Ledger, sink: Sink) -> None:
        self.ledger = ledger
        self.sink = sink

    @classmethod
    def sql(
        cls, url: str, results_table: str, outputs: tuple[OutputColumn, ...], key_type: KeyType
    ) -> ResultStore:
        """Ledger and results table in one database, ``url``: the embedded default's shape."""
        from shardwise.sinks.sql.sink import SqlSink

        ledger = Ledger(url)
        try:
            return cls(ledger, SqlSink(url, results_table, Layout(tuple(outputs), key_type)))
        except BaseException:
            ledger.close()
            raise

    def __repr__(self) -> str:
        return f"ResultStore({self.ledger!r}, {self.sink!r})"

    @property
    def results_table(self) -> str:
        """What the ledger records as the run's results: the sink's target."""
        return self.sink.target

    @property
    def outputs(self) -> tuple[OutputColumn, ...]:
        return self.sink.layout.outputs

    def close(self) -> None:
        """Close the ledger's and the sink's pooled connections."""
        try:
            self.sink.close()
        finally:
            self.ledger.close()

    def ensure_schema(self) -> None:
        """Create the ledger tables and the sink's target if missing; check an existing target's layout."""
        self.ledger.ensure()
        self.sink.ensure()

    def chunk_writer(
        self, run: RunRecord, shard_id: int, attempt: int, outage: Outage | None = None
    ) -> ChunkWriter:
        """A writer that commits one attempt at one shard chunk by chunk; use it as a context manager.

        Each step of a chunk's commit is tried again until ``outage``'s
        deadline (the shard's clock; a fresh one with the default policy when
        None), then the attempt fails (see :mod:`shardwise.retry_policy`).
        """
        # The same target recorded by reference or in clear (shardwise.secrets.by_reference) is the same
        # target.
        if not same_location(run.results_table, self.sink.target):
            raise ConfigError(
                f"run {run.run_id!r} writes to {run.results_table!r} but this store's sink is "
                f"{self.sink.target!r}; open the sink of the run's results"
            )
        return ChunkWriter(self.ledger, self.sink, run, shard_id, attempt, outage)

    def read_results(
        self, *, model_version: str | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Result rows ordered by key, vectors as float32 arrays; for tests and summaries, not bulk export."""
        rows = self.sink.read(model_version)
        return rows if limit is None else rows[:limit]

    def count_results(self, model_version: str | None = None) -> int:
        return len(self.sink.read(model_version))
