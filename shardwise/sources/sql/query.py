"""The queries of a SQL source, built with SQLAlchemy Core from reflected tables.

Identifiers come from the reflected :class:`sqlalchemy.Table`, so SQLAlchemy
quotes them; values (shard bounds, the model version, shard counts) are bound
parameters. The one piece of SQL text is the operator's ``where`` filter, and
only as :func:`~shardwise.sources.sql.where.parse_filter` rendered it: one
checked expression, in parentheses, AND-ed with the other conditions as a
separate term, so it cannot widen the key range it is combined with.

Every query considers the same rows: those the filter keeps, whose key is not
NULL, and, under ``--only-new``, that have no result for the model version with
the current input fingerprint (a ``NOT EXISTS`` anti-join in the database).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

from shardwise.sources.sql.fingerprint import fingerprint, stored_key
from shardwise.sources.sql.schema import SourceTable

if TYPE_CHECKING:  # the filter's parser loads only when a filter is given (sqlglot, 0.15 s)
    from shardwise.sources.sql.where import SqlFilter

__all__ = [
    "Selection",
    "boundary_window_query",
    "count_query",
    "filter_probe",
    "quantile_query",
    "read_query",
    "sample_query",
]


def _operator_filter(where: SqlFilter) -> sa.TextClause:
    # Colons are escaped so text() finds no bind parameters in a filter such as
    # "created_at > '2024-01-01 10:00'"; a checked filter carries literal values only.
    return sa.text("(" + where.sql.replace(":", "\\:") + ")")


@dataclass(frozen=True)
class Selection:
    """Which rows of the source table a plan or a read considers."""

    src: SourceTable
    dialect: str
    where: SqlFilter | None = None
    """The operator's filter, already parsed and checked (see :mod:`shardwise.sources.sql.where`)."""
    results: sa.Table | None = None
    """The results table to anti-join (``--only-new``), or None to take every row."""
    model_version: str | None = None

    def filters(self) -> list[sa.ColumnElement[bool] | sa.TextClause]:
        """The operator's filter, if any: applied before anything else."""
        return [] if self.where is None else [_operator_filter(self.where)]

    def fingerprint(self) -> sa.ColumnElement[Any]:
        """The input fingerprint of a row, computed in the database as the pipeline stores it.

        See :mod:`shardwise.sources.sql.fingerprint` (text and binary columns alike, and pairs).
        """
        return fingerprint(self.src.inputs, self.dialect)

    def is_new(self) -> sa.ColumnElement[bool]:
        """True when the row has no result for the model version with its current fingerprint.

        A NULL text has a NULL fingerprint, which matches no result, so such
        rows always count as new (and are dead-lettered again on every run).
        """
        if self.results is None:
            return sa.true()
        r = self.results
        return ~sa.exists().where(
            r.c.source_key == stored_key(self.src.key, self.dialect),
            r.c.model_version == sa.bindparam("model_version", self.model_version, type_=sa.Text),
            r.c.input_fingerprint == self.fingerprint(),
        )

    def conditions(self) -> list[sa.ColumnElement[bool] | sa.TextClause]:
        """Every condition a row must meet to be planned and read."""
        conds: list[sa.ColumnElement[bool] | sa.TextClause] = [*self.filters(), self.src.key.is_not(None)]
        if self.results is not None:
            conds.append(self.is_new())
        return conds


def filter_probe(sel: Selection) -> sa.Select[Any]:
    """No rows, but the database parses and plans the filter: a missing column or bad syntax fails here."""
    return sa.select(sel.src.key).where(*sel.filters()).limit(0)


def count_query(sel: Selection) -> sa.Select[int, int, int, int]:
    """One row: (NULL keys, rows only-new skips, rows to plan, distinct keys to plan)."""
    base = sa.select(sel.src.key.label("k"), sel.is_new().label("n")).where(*sel.filters()).subquery()
    keyed, new = base.c.k.is_not(None), base.c.n
    return sa.select(
        sa.func.count().filter(base.c.k.is_(None)),
        sa.func.count().filter(sa.and_(keyed, sa.not_(new))),
        sa.func.count().filter(sa.and_(keyed, new)),
        sa.func.count(sa.distinct(base.c.k)).filter(sa.and_(keyed, new)),
    )


def quantile_query(sel: Selection, fractions: Sequence[float]) -> sa.Select[int, Any]:
    """PostgreSQL: one row, (distinct keys, the key at each fraction of the distinct keys).

    ``percentile_disc`` over the distinct keys, so the boundaries are distinct
    keys and no shard is empty by construction, even when key values repeat.
    """
    keys = sa.select(sel.src.key.label("k")).where(*sel.conditions()).distinct().subquery()
    at: sa.ColumnElement[list[float]] = sa.literal(list(fractions), pg.ARRAY(sa.Double()))
    return sa.select(sa.func.count(), sa.func.percentile_disc(at).within_group(keys.c.k))


def boundary_window_query(sel: Selection, shards: int, distinct: int) -> sa.Select[Any, int]:
    """Any database with window functions: the first key of every shard but the first, and its rank.

    The distinct keys are numbered 0..distinct-1 (``dense_rank() - 1``); key
    number ``x`` belongs to shard ``floor(x * shards / distinct)``, so a key
    starts a shard where that value steps up. ``rank()`` counts the rows before
    a key, which makes the shard sizes exact. Only ``shards - 1`` rows return.
    """
    key = sel.src.key
    ranked = (
        sa.select(
            key.label("k"),
            sa.func.row_number().over(order_by=key).label("rn"),
            sa.func.rank().over(order_by=key).label("rk"),
            sa.func.dense_rank().over(order_by=key).label("dr"),
        )
        .where(*sel.conditions())
        .subquery()
    )
    n = sa.bindparam("shards", shards, type_=sa.BigInteger())
    d = sa.bindparam("distinct", distinct, type_=sa.BigInteger())
    x = ranked.c.dr - 1
    return (
        sa.select(ranked.c.k, ranked.c.rk)
        .where(ranked.c.rn == ranked.c.rk, x > 0, (x * n) // d > ((x - 1) * n) // d)
        .order_by(ranked.c.k)
    )


def read_query(sel: Selection, lo: Any, hi: Any, after: Any = None) -> sa.Select[Any, Any]:
    """The rows of one shard, ``lo <= key < hi`` (None: unbounded), ordered by key.

    ``after`` resumes a shard: only keys above it, the last key already committed.
    """
    key = sel.src.key
    conds = sel.conditions()
    if lo is not None:
        conds.append(key >= lo)
    if hi is not None:
        conds.append(key < hi)
    if after is not None:
        conds.append(key > after)
    return sa.select(key, *sel.src.inputs).where(*conds).order_by(key)


def sample_query(sel: Selection, rows: int, prefix: int) -> sa.Select[Any]:
    """The first ``prefix`` bytes of up to ``rows`` non-NULL values of the text column, of rows the plan
    would consider, in no order: what a binary column holds (see :mod:`shardwise.sources.binary`)."""
    text = sel.src.text
    head = sa.func.substr(text, 1, prefix, type_=text.type)  # bytea and BLOB alike in both databases
    return sa.select(head).where(*sel.conditions(), text.is_not(None)).limit(rows)
