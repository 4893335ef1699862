"""The sink seam: where a run's results go, and the one promise every sink keeps.

A run's rows are committed chunk by chunk (:mod:`shardwise.pipeline.chunks`).
For each chunk the ledger (:mod:`shardwise.results.ledger`, which may live
in another database) asks the sink to commit it, then records the chunk's
mark and dead letters. The sink's commit is the commit point:

1. :meth:`Sink.commit` writes the chunk's rows and, in the same atomic step,
   a record that this (run, shard, chunk) landed, with the chunk's position
   and merge counts. Called again for a chunk that landed (a retry whose
   answer was lost, a resumed attempt, a racing worker), it writes nothing
   and returns the record stored the first time (status ``already``).
2. Only then does the ledger mark the chunk, and, after the last chunk, the
   shard. A kill between the two costs a resumed attempt the scoring of that
   one chunk again; its sink commit is found and not written twice.
3. Before the ledger marks the shard done, :meth:`Sink.seal` records in the
   sink that the shard takes no more chunks: a commit record at the next
   chunk's number, made the way a chunk's is (exclusively), so a stale
   attempt (one whose lease was taken over, still scoring) that then commits
   a chunk there is answered ``sealed`` and writes nothing, however late it
   comes. Chunks it commits below the seal were committed already and are
   answered ``already``.

How each sink makes step 1 atomic: the SQL sink merges the rows and inserts
its commit record in one transaction; Delta carries an app transaction
(``shardwise:<run>:<shard>``, version = chunk number + 1) in the commit that
appends the rows; Parquet files become visible by a rename and a manifest
entry created exclusively. See each module.

Like Ray Data's ``Datasink``: open for a run (:meth:`Sink.ensure`), write
and commit a piece idempotently, answer whether a piece's commit landed,
close. Unlike it, rows keep Shardwise's lineage (:class:`Lineage`) and the
merge rule: one row per (source key, model version), replaced only when the
input changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from shardwise.model import OutputColumn
from shardwise.sources.base import KeyType

if TYPE_CHECKING:
    from shardwise.records import ResultRow

__all__ = ["Layout", "Lineage", "MergeCounts", "Sink", "SinkChunk", "SinkCommit", "last_per_key"]


@dataclass(frozen=True, slots=True)
class Lineage:
    """The lineage columns every row of one chunk commit shares (see :mod:`shardwise.sinks.sql.merge`)."""

    model_name: str
    model_version: str
    code_version: str
    input_snapshot: str | None
    run_id: str
    shard_id: int
    scored_at: datetime


@dataclass(frozen=True, slots=True)
class MergeCounts:
    """What merging one chunk did: rows inserted, rows updated (their input changed), rows left as stored."""

    inserted: int
    updated: int
    unchanged: int


@dataclass(frozen=True)
class Layout:
    """What a sink stores per row: the key's type and the model's declared outputs (lineage is fixed)."""

    outputs: tuple[OutputColumn, ...]
    key_type: KeyType


@dataclass(frozen=True)
class SinkChunk:
    """One chunk to commit: its rows (input order), their lineage, and where the shard goes on after it."""

    run_id: str
    shard_id: int
    number: int
    rows: Sequence[ResultRow]
    lineage: Lineage
    position: Mapping[str, Any]
    """``{"rows": ..., "key": ...}``: stored with the commit (see :class:`~shardwise.results.ChunkMark`)."""


@dataclass(frozen=True, slots=True)
class SinkCommit:
    """A chunk's commit as the sink recorded it.

    ``written``: this call committed it. ``already``: it had landed before,
    and the position and counts are the ones stored then. ``sealed``: the
    shard was sealed at this chunk (:meth:`Sink.seal`): it takes no more
    chunks, and nothing was written.
    """

    status: Literal["written", "already", "sealed"]
    position: Mapping[str, Any]
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0


@runtime_checkable
class Sink(Protocol):
    """Where a run's results go; safe to share between the threads of one process.

    A run calls it in this order (from several threads, and several processes at once):

    1. :meth:`tidy` as the run starts: delete what killed writers of finished runs left.
    2. :meth:`check` (a dry run, the checks before a run) or :meth:`ensure` (a run), then
       :meth:`stored_key_type`.
    3. :meth:`committed_inputs`, for ``--only-new``.
    4. Per shard: :meth:`commit` for each chunk (then the ledger marks it), and :meth:`seal` after
       the last (then the ledger marks the shard done); :meth:`committed` answers whether a chunk's
       commit landed, for those two and for tools.
    5. :meth:`finish` once every shard of the run is committed.
    6. :meth:`close`.
    """

    target: str
    """What the ledger records as the run's results (``RunRecord.results_table``): a table name for
    the SQL sink, ``delta:LOCATION`` or ``parquet:LOCATION`` for the lake sinks; never a secret."""
    layout: Layout

    def check(self) -> None:
        """Refuse an existing target of another layout; create nothing (dry runs, pre-flight checks)."""

    def ensure(self) -> None:
        """Create the target if missing, check an existing one; idempotent, safe from several processes."""

    def stored_key_type(self) -> KeyType | None:
        """The key type of the rows already stored; None when the target does not exist yet."""

    def commit(self, chunk: SinkChunk) -> SinkCommit:
        """Write the chunk's rows and its commit record atomically, once (see the module docstring).

        Rows of one chunk with the same key: the last one counts.
        """

    def seal(self, run_id: str, shard_id: int, number: int) -> SinkCommit:
        """Close the shard to chunks from ``number`` on (one after its last): a commit record there,
        created exclusively. Returns ``sealed`` when this call or an earlier one sealed it, or the
        record of a chunk another attempt committed there first (``already``), which the caller
        marks before sealing after it. Idempotent."""

    def committed(self, run_id: str, shard_id: int, number: int) -> SinkCommit | None:
        """The commit record of that chunk (``already``, or ``sealed`` where the shard was sealed), or
        None when nothing has landed there."""

    def committed_inputs(self, model_version: str) -> Iterator[tuple[str, str]]:
        """``(source key as text, input fingerprint)`` of every row stored for ``model_version``: what
        ``--only-new`` leaves out."""

    def finish(self, run_id: str) -> list[str]:
        """Work after a run committed every shard (an ANN index); idempotent; may take long. Returns
        what it did, a line each, for the run's log and summary (``[]`` for nothing)."""

    def tidy(self, over: Callable[[str], bool | None]) -> list[str]:
        """Delete what writers killed mid-commit left behind, of the runs ``over`` says are over (no
        process of them writes any more; None: a run the caller's ledger does not know, left alone).
        A run calls it as it starts. Returns what it deleted, a line each (``[]`` for nothing, and
        always for a sink whose commit leaves nothing behind: a database transaction rolls back)."""

    def read(self, model_version: str | None = None) -> list[dict[str, Any]]:
        """Rows ordered by key (vectors as float32 arrays): for tests and summaries, not bulk export."""

    def close(self) -> None:
        """Release connections and clients; a closed sink may not be used again."""


def last_per_key(rows: Sequence[ResultRow]) -> list[ResultRow]:
    """The rows with one per key, the last of each, in order of those last rows.

    A source key should appear once per shard, but a Parquet key column need not be unique.
    """
    last = {row.key: i for i, row in enumerate(rows)}
    if len(last) == len(rows):
        return list(rows)
    return [row for i, row in enumerate(rows) if last[row.key] == i]
