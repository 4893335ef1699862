"""The key must be unique: each row's result is stored, and found again, under its key.

Two rows with one key would both be read and scored, but the results table
holds one row per (key, model version), so one result silently replaces the
other while the run counts both. So a SQL source refuses such a table when it
plans, and in :meth:`~shardwise.sources.sql.SqlSource.check`, before a run:

* **Free when declared:** a primary key, unique constraint or (non-partial)
  unique index on exactly the key column, as reflected when the source opened,
  proves it with no query.
* **Otherwise one query:** ``SELECT key ... WHERE <filter> AND key IS NOT NULL
  GROUP BY key HAVING count(*) > 1 ORDER BY key LIMIT 5``, in the caller's
  transaction (at planning, the plan's snapshot). It reads the key column of
  the filtered rows once, like planning's own count; an index on the key
  makes it an index-only scan. Declaring the key unique makes it free.

Rows with a NULL key are never planned, so they are not duplicates here.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from shardwise.errors import ConfigError
from shardwise.sources.sql.query import Selection

__all__ = ["SHOWN_DUPLICATES", "check_unique_key", "declared_unique"]

SHOWN_DUPLICATES = 5
"""How many repeated keys the error names."""


def _only(columns: Any, key: sa.Column[Any]) -> bool:
    names = [c.name for c in columns]
    return names == [key.name]


def _partial(index: sa.Index) -> bool:
    return any(opts.get("where") is not None for opts in index.dialect_options.values())


def declared_unique(table: sa.Table, key: sa.Column[Any]) -> bool:
    """True when the reflected ``table`` declares ``key`` unique on its own."""
    if _only(table.primary_key.columns, key):
        return True
    for constraint in table.constraints:
        if isinstance(constraint, sa.UniqueConstraint) and _only(constraint.columns, key):
            return True
    # An index on (key, lower(x)) reflects key as its only column: count its expressions too.
    return any(
        ix.unique and len(ix.expressions) == 1 and _only(ix.columns, key) and not _partial(ix)
        for ix in table.indexes
    )


def _duplicates_query(sel: Selection) -> sa.Select[Any]:
    key = sel.src.key
    return (
        sa.select(key)
        .where(*sel.filters(), key.is_not(None))
        .group_by(key)
        .having(sa.func.count() > 1)
        .order_by(key)
        .limit(SHOWN_DUPLICATES)
    )


def check_unique_key(conn: sa.Connection, sel: Selection, identity: str) -> None:
    """Raise :class:`ConfigError` naming up to five repeated keys among the rows ``sel`` filters."""
    src = sel.src
    if declared_unique(src.table, src.key):
        return
    repeated = list(conn.execute(_duplicates_query(sel)).scalars())
    if not repeated:
        return
    shown = ", ".join(repr(k) for k in repeated)
    more = f" (the first {SHOWN_DUPLICATES})" if len(repeated) == SHOWN_DUPLICATES else ""
    keys = "key" if len(repeated) == 1 else "keys"
    appear = "appears" if len(repeated) == 1 else "appear"
    raise ConfigError(
        f"key column {src.key.name!r} of {identity} is not unique: {keys} {shown}{more} {appear} on more "
        f"than one row, and each row's result is stored under its key, so one would overwrite another; add a "
        f"primary key or unique index on {src.key.name!r}, choose a unique --key, or filter the repeats "
        "out with --where"
    )
