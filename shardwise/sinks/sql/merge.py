"""The exactly-once merge of one shard's staged rows into the results table.

Rule for a key already scored by the same model version: if the stored row's
``input_fingerprint`` equals the new one, the row is left exactly as it is
(its original run, shard and ``scored_at`` lineage stay true: the same model on
the same input gave that result first). If the fingerprint differs, the input
changed and the new row replaces the old one, lineage included. A different
model version is a different primary key, so its rows sit beside the old ones.

The caller runs this inside the shard's transaction, after locking the shard's
ledger row, and marks the shard done in the same transaction.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from shardwise.db.codec import UtcTimestamp
from shardwise.sinks.base import Lineage, MergeCounts
from shardwise.sinks.naming import LINEAGE_COLUMNS

__all__ = ["merge_rows", "merge_statement"]


def _lineage_columns(lineage: Lineage) -> list[sa.ColumnElement[Any]]:
    types: dict[str, sa.types.TypeEngine[Any]] = {"shard_id": sa.Integer(), "scored_at": UtcTimestamp()}
    return [
        sa.literal(getattr(lineage, name), types.get(name, sa.Text())).label(name)
        for name in LINEAGE_COLUMNS
        if name not in ("truncated", "input_fingerprint")
    ]


def merge_statement(results: sa.Table, stage: sa.Table, dialect: str, lineage: Lineage) -> sa.Insert:
    """``INSERT INTO results SELECT ... FROM stage ON CONFLICT (source_key, model_version) DO UPDATE``,

    updating only where the stored input fingerprint differs from the new one.
    """
    staged = [c for c in stage.columns if c.name != "seq"]
    select = sa.select(*staged, *_lineage_columns(lineage))
    # SQLite cannot tell "SELECT ... FROM t ON CONFLICT" from a join's ON without a WHERE.
    select = select.where(sa.true())
    names = [c.name for c in select.selected_columns]
    insert = postgresql.insert(results) if dialect == "postgresql" else sqlite.insert(results)
    stmt = insert.from_select(names, select)
    keys = {"source_key", "model_version"}
    return stmt.on_conflict_do_update(
        index_elements=[results.c.source_key, results.c.model_version],
        set_={name: stmt.excluded[name] for name in names if name not in keys},
        where=results.c.input_fingerprint.is_distinct_from(stmt.excluded.input_fingerprint),
    )


def _count_existing(conn: sa.Connection, results: sa.Table, stage: sa.Table, model_version: str) -> int:
    match = sa.and_(results.c.source_key == stage.c.source_key, results.c.model_version == model_version)
    return int(conn.execute(sa.select(sa.func.count()).select_from(stage.join(results, match))).scalar_one())


def merge_rows(
    conn: sa.Connection, results: sa.Table, stage: sa.Table, staged_rows: int, lineage: Lineage
) -> MergeCounts:
    """Merge the staged rows; ``staged_rows`` is how many the stage holds (one per key).

    The split is computed, not returned by the database: rows that already
    existed are counted first, then the statement's row count is inserted plus
    updated. Both run under the shard lock; on PostgreSQL another run merging
    the same keys at the same moment can blur the split, never the data.
    """
    existing = _count_existing(conn, results, stage, lineage.model_version)
    stmt = merge_statement(results, stage, conn.dialect.name, lineage)
    # SQLAlchemy keeps the driver's row count only for UPDATE and DELETE unless asked.
    changed = conn.execute(stmt.execution_options(preserve_rowcount=True)).rowcount
    inserted = max(staged_rows - existing, 0)
    updated = max(changed - inserted, 0)
    return MergeCounts(inserted=inserted, updated=updated, unchanged=max(staged_rows - inserted - updated, 0))
