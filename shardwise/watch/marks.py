"""How a watcher tells that a table changed: the trigger's change counter, or a watermark.

* :class:`CounterTracker` reads the row the change trigger keeps for the table
  in ``shardwise_watch_changes``: ``seq`` grows by one per changing statement
  (INSERT or UPDATE), ``changed_rows`` by the rows it changed. A different
  ``seq`` means something changed, updates included, at the cost of one
  primary-key lookup. With no stored mark the baseline is ``seq`` 0 (the
  counter's value when the trigger was installed), so changes made after
  installing but before the first watcher started are announced too.
* :class:`WatermarkTracker` needs no trigger: it reads ``max(column)`` and
  ``count(*)``, where the column is the key, or an ``updated_at`` column that
  also moves on updates. Either value moving is a change. It cannot know what
  changed before it first looked, so with no stored mark it records a
  baseline and announces nothing. ``count(*)`` scans the table on PostgreSQL:
  on large tables prefer the trigger.

A mark is JSON (see :mod:`shardwise.watch.state`); ``kind`` names the
tracker that wrote it, and a mark of another kind counts as no mark.
"""

from __future__ import annotations

from typing import Any, Protocol

import sqlalchemy as sa

from shardwise.watch.state import Mark
from shardwise.watch.table import WatchedTable, from_json, to_json

__all__ = ["CounterTracker", "Tracker", "WatermarkTracker", "max_key"]

_NO_CHANGES: Mark = {"kind": "counter", "seq": 0, "rows": 0}


class Tracker(Protocol):
    """Reads a table's mark, and says what changed between two marks."""

    kind: str

    def read(self, conn: sa.Connection) -> Mark:
        """The table's current mark."""
        ...

    def since(self, conn: sa.Connection, last: Mark | None, now: Mark) -> dict[str, Any] | None:
        """The payload fields describing the change from ``last`` to ``now``; None when nothing changed."""
        ...


def max_key(conn: sa.Connection, table: WatchedTable) -> Any:
    """The table's largest key, JSON-able."""
    return to_json(conn.execute(sa.select(sa.func.max(table.src.key))).scalar())


class CounterTracker:
    """Follows the change trigger's counter row for one table."""

    kind = "counter"

    def __init__(self, table: WatchedTable, watch_schema: str) -> None:
        self._table = table
        self._changes = sa.table(
            "shardwise_watch_changes",
            sa.column("source_table"),
            sa.column("seq"),
            sa.column("changed_rows"),
            schema=watch_schema,
        )

    def read(self, conn: sa.Connection) -> Mark:
        c = self._changes.c
        stmt = sa.select(c.seq, c.changed_rows).where(c.source_table == self._table.label)
        row = conn.execute(stmt).first()
        seq, rows = (int(row[0]), int(row[1])) if row is not None else (0, 0)
        return {"kind": self.kind, "seq": seq, "rows": rows}

    def since(self, conn: sa.Connection, last: Mark | None, now: Mark) -> dict[str, Any] | None:
        prev = last if last is not None and last.get("kind") == self.kind else _NO_CHANGES
        if now["seq"] == prev["seq"]:
            return None
        rows = now["rows"] - prev["rows"]
        # A counter that went backwards was recreated (its table dropped): count from zero.
        rows = rows if rows >= 0 else now["rows"]
        return {"seq": now["seq"], "rows": rows, "max_key": max_key(conn, self._table)}


class WatermarkTracker:
    """Follows ``max(column)`` and ``count(*)`` of one table."""

    def __init__(self, table: WatchedTable) -> None:
        self._table = table
        self.kind = "updated_at" if table.tracks_updated_at else "key"

    def read(self, conn: sa.Connection) -> Mark:
        column = self._table.column
        stmt = sa.select(sa.func.max(column), sa.func.count()).select_from(self._table.src.table)
        top, count = conn.execute(stmt).one()
        return {"kind": self.kind, "max": to_json(top), "count": int(count)}

    def since(self, conn: sa.Connection, last: Mark | None, now: Mark) -> dict[str, Any] | None:
        if last is None or last.get("kind") != self.kind:
            return None  # first look: a baseline, not a change
        if (now["max"], now["count"]) == (last["max"], last["count"]):
            return None
        field = "max_key" if self.kind == "key" else "max_updated_at"
        return {field: now["max"], "rows": self._past(conn, last["max"]), "count": now["count"]}

    def _past(self, conn: sa.Connection, previous: Any) -> int:
        """Rows whose watermark column is past ``previous``: the rows that landed or changed since."""
        column = self._table.column
        past = column.is_not(None) if previous is None else column > from_json(previous, column)
        stmt = sa.select(sa.func.count()).select_from(self._table.src.table).where(past)
        return int(conn.execute(stmt).scalar_one())
