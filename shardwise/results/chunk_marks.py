"""The chunk marks of ``shardwise_chunks``: one row per committed chunk of a shard.

A shard is merged chunk by chunk (:mod:`shardwise.results.chunk_writer`).
Each chunk's mark is inserted in the transaction that merges its rows and
dead letters, so the mark exists exactly when the chunk is in the results
table: a retried or racing writer that finds it merges nothing, and a
retried or resumed attempt starts after the last mark (:class:`ChunkStart`).
The shard's done-mark records the sum of its marks (:class:`ChunkTotals`),
whichever attempts wrote them, the sums of the model's count outputs
included (:mod:`shardwise.model.counts`). The DDL and queries are in ``sql/``
(``shardwise_chunks`` in ``ledger_schema.sql``, ``chunk_*.sql``, ``chunks_*.sql``).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa

from shardwise.db.codec import bind_timestamp, decode_json, decode_row, encode_json
from shardwise.db.sqlfiles import statement
from shardwise.model.counts import Counts, added
from shardwise.sources.base import Key

__all__ = [
    "ChunkMark",
    "ChunkStart",
    "ChunkTotals",
    "chunk_marks",
    "chunk_position",
    "chunk_start",
    "chunk_totals",
    "insert_mark",
    "read_marks",
    "run_counts",
]


@dataclass(frozen=True, slots=True)
class ChunkStart:
    """Where an attempt at a shard starts: chunk ``chunk``, after ``rows`` rows in input order.

    ``key`` is the key of the last row already committed (None when no row
    is, or the key is not an integer or text); ``failed`` counts the dead
    letters among those rows and ``counts`` sums their count outputs, so live
    progress can start from them.
    """

    chunk: int = 0
    rows: int = 0
    key: Key | None = None
    failed: int = 0
    counts: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ChunkTotals:
    """A shard's counts summed over its chunk marks: what its done-mark records."""

    chunks: int = 0
    rows_in: int = 0
    rows_out: int = 0
    rows_failed: int = 0
    rows_truncated: int = 0
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_unchanged: int = 0
    counts: Mapping[str, int] = field(default_factory=dict)
    """The sums of the model's count outputs over the shard's scored rows (empty when it declares none)."""


@dataclass(frozen=True, slots=True)
class ChunkMark:
    """One row of ``shardwise_chunks``: a chunk merged, by which attempt, and where the next one starts."""

    shard_id: int
    chunk: int
    attempt: int
    rows_in: int
    rows_out: int
    rows_failed: int
    rows_truncated: int
    rows_inserted: int
    rows_updated: int
    rows_unchanged: int
    position: Mapping[str, Any]
    """``{"rows": rows of the shard up to and including this chunk, "key": its last row's key}``."""
    committed_at: datetime | None = None
    counts: Mapping[str, int] = field(default_factory=dict)
    """The sums of the model's count outputs over the chunk's scored rows (empty when it declares none)."""


def _where(run_id: str, shard_id: int) -> dict[str, Any]:
    return {"run_id": run_id, "shard_id": shard_id}


def chunk_position(conn: sa.Connection, run_id: str, shard_id: int, chunk: int) -> Mapping[str, Any] | None:
    """The stored position of a committed chunk; None when it is not committed."""
    found = conn.execute(
        statement(conn, "chunk_position"), {**_where(run_id, shard_id), "chunk": chunk}
    ).scalar_one_or_none()
    return None if found is None else dict(decode_json(found))


def insert_mark(conn: sa.Connection, run_id: str, mark: ChunkMark, now: datetime) -> None:
    """Insert a chunk's mark; call it in the transaction that merges the chunk."""
    params = {
        **_where(run_id, mark.shard_id),
        "chunk": mark.chunk,
        "attempt": mark.attempt,
        "rows_in": mark.rows_in,
        "rows_out": mark.rows_out,
        "rows_failed": mark.rows_failed,
        "rows_truncated": mark.rows_truncated,
        "rows_inserted": mark.rows_inserted,
        "rows_updated": mark.rows_updated,
        "rows_unchanged": mark.rows_unchanged,
        "position": encode_json(mark.position),
        "committed_at": bind_timestamp(conn, now),
        "counts": encode_json(mark.counts) if mark.counts else None,
    }
    conn.execute(statement(conn, "chunk_insert"), params)


def chunk_totals(conn: sa.Connection, run_id: str, shard_id: int) -> ChunkTotals:
    row = conn.execute(statement(conn, "chunks_totals"), _where(run_id, shard_id)).mappings().one()
    counts = _summed(conn, _where(run_id, shard_id))
    return ChunkTotals(**{name: int(value) for name, value in row.items()}, counts=counts)


def run_counts(conn: sa.Connection, run_id: str) -> Counts:
    """The run's count outputs summed over every committed chunk of every shard, by whichever attempt."""
    return _summed(conn, {"run_id": run_id, "shard_id": None})


def _summed(conn: sa.Connection, where: Mapping[str, Any]) -> Counts:
    # JSON is summed here, not in SQL: the two dialects' JSON functions differ.
    return added(*(decode_json(c) for c in conn.execute(statement(conn, "chunks_counts"), where).scalars()))


def chunk_start(conn: sa.Connection, run_id: str, shard_id: int) -> ChunkStart:
    """Where the next attempt at the shard starts: after its last committed chunk."""
    last = conn.execute(statement(conn, "chunk_last"), _where(run_id, shard_id)).one_or_none()
    if last is None:
        return ChunkStart()
    position = decode_json(last.position)
    key = position.get("key")
    totals = chunk_totals(conn, run_id, shard_id)
    return ChunkStart(
        chunk=int(last.chunk) + 1,
        rows=int(position["rows"]),
        key=key if isinstance(key, (int, str)) else None,
        failed=totals.rows_failed,
        counts=totals.counts,
    )


def chunk_marks(conn: sa.Connection, run_id: str) -> list[ChunkMark]:
    rows = conn.execute(statement(conn, "chunks_select"), {"run_id": run_id}).mappings()
    json_columns = ["position", "counts"]
    return [ChunkMark(**decode_row(r, timestamps=["committed_at"], json_columns=json_columns)) for r in rows]


class _Reads(Protocol):
    """What :func:`read_marks` needs of a :class:`~shardwise.results.ledger.Ledger`: a read transaction."""

    def reading(self, action: str) -> AbstractContextManager[sa.Connection]: ...


def read_marks(ledger: _Reads, run_id: str) -> list[ChunkMark]:
    """Every chunk mark of ``run_id``, in shard and chunk order: what was merged, by which attempt."""
    with ledger.reading(f"read the chunks of run {run_id}") as conn:
        return chunk_marks(conn, run_id)
