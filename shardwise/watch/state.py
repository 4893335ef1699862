"""What a watcher last announced, persisted in the watched database so nothing is lost across restarts.

A *mark* is a small JSON object describing the table's state: the trigger's
change counter, or a watermark (largest key or ``updated_at``, and the row
count). After each check the watcher stores its mark in
``shardwise_watch_state`` under its name; a restarted or reconnected watcher
compares the current mark with the stored one and announces what changed
while it was away.

The mark is stored after the event is emitted, so delivery is at least once:
a crash between the two announces the same change again on restart, which an
only-new run absorbs. A stored mark written for another source (the name was
reused for a different table) is ignored, as if there were none.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import sqlalchemy as sa

from shardwise.db.sqlfiles import query
from shardwise.secrets.by_reference import same_location

__all__ = ["Mark", "WatchState"]

Mark = dict[str, Any]
_log = logging.getLogger(__name__)


class WatchState:
    """The last mark one named watcher of one source recorded."""

    def __init__(self, name: str, identity: str, dialect: str) -> None:
        self.name, self.identity, self.dialect = name, identity, dialect
        self.last: Mark | None = None
        self.loaded = False

    def load(self, conn: sa.Connection) -> Mark | None:
        """Create the state table if needed and read this watcher's stored mark (None: none yet)."""
        conn.execute(query(self.dialect, "watch_state_create"))
        row = conn.execute(query(self.dialect, "watch_state_select"), {"name": self.name}).first()
        stored = json.loads(row[0]) if row is not None else None
        # The same source recorded in clear (before a reference was named by it) keeps its mark.
        if stored is not None and not same_location(str(stored.get("identity")), self.identity):
            _log.warning(
                "watcher %r has stored state for %s, not %s; starting afresh",
                self.name, stored.get("identity"), self.identity,
            )  # fmt: skip
            stored = None
        self.last = stored["mark"] if stored is not None else None
        self.loaded = True
        return self.last

    def record(self, conn: sa.Connection, mark: Mark) -> None:
        """Store ``mark`` as the last one announced, if it differs from the stored one."""
        if mark == self.last:
            return
        state = json.dumps({"identity": self.identity, "mark": mark}, sort_keys=True)
        conn.execute(query(self.dialect, "watch_state_upsert"), {"name": self.name, "state": state})
        self.last = mark
