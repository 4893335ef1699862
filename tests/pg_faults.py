"""Terminate the PostgreSQL backends of a run's staging COPY and merge INSERT, one per committed chunk."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import sqlalchemy as sa

_ACTIVE = (
    "SELECT pid, left(query, 60) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active' AND query LIKE :like"
)


class BackendKiller(threading.Thread):
    """Terminates the backend of each target statement in turn, then waits for a chunk to commit.

    A COPY into a staging table is caught as it runs. To catch the merge
    INSERT into ``table`` every time, the killer first takes a SHARE lock on
    it, so the INSERT waits where the killer can see it; the table must
    exist by then (it waits for it).
    """

    def __init__(self, url: str, table: str, targets: Sequence[str]) -> None:
        super().__init__(name="backend-killer", daemon=True)
        self.engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        self.table, self.targets = table, tuple(targets)
        self.like = {"COPY": "COPY %shardwise_stage%", "INSERT": f"INSERT INTO {table} %"}
        self.kills: list[tuple[str, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with self.engine.connect() as conn:
            for target in self.targets:
                killed = self._kill(conn, target)
                if killed is None:
                    return
                self.kills.append((target, killed))
                marks = self._marks(conn)
                while not self.stop.is_set() and self._marks(conn) <= marks:
                    time.sleep(0.005)

    def _kill(self, conn: sa.Connection, target: str) -> str | None:
        blocker = self.engine.connect() if target == "INSERT" else None
        try:
            if blocker is not None:  # the merge INSERT waits on this lock, where it can be seen
                while not self.stop.is_set() and not sa.inspect(blocker).has_table(self.table):
                    time.sleep(0.01)
                blocker.exec_driver_sql("BEGIN")
                blocker.exec_driver_sql(f"LOCK TABLE {self.table} IN SHARE MODE")
            while not self.stop.is_set():
                found = conn.execute(sa.text(_ACTIVE), {"like": self.like[target]}).first()
                if found is not None:
                    conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": found[0]})
                    return str(found[1])
                time.sleep(0.001)
            return None
        finally:
            if blocker is not None:
                blocker.exec_driver_sql("ROLLBACK")
                blocker.close()

    def _marks(self, conn: sa.Connection) -> int:
        if not sa.inspect(conn).has_table("shardwise_chunks"):
            return 0
        return int(conn.execute(sa.text("SELECT count(*) FROM shardwise_chunks")).scalar_one())
