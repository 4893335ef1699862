"""One PostgreSQL snapshot for a whole run: exported when planning, imported by every read.

The planning transaction (``REPEATABLE READ``, read only) calls
``pg_export_snapshot()`` and stays open; each read opens its own transaction
and ``SET TRANSACTION SNAPSHOT`` to see exactly what the plan saw. An exported
snapshot lives only as long as the transaction that exported it, so a read
after that (a resumed run in a new process) cannot import it. It then reads at
a fresh ``REPEATABLE READ`` snapshot and says so: :func:`import_snapshot`
returns the snapshot actually read and a ``lost`` flag for lineage.

A stored snapshot is ``<exported id>|<pg_current_snapshot()>``, e.g.
``00000003-0000001B-1|748:748:``: the id to import, and the visibility
(xmin:xmax:xip) that lineage can compare across runs.
"""

from __future__ import annotations

import logging
import re

import sqlalchemy as sa

from shardwise.errors import ConfigError, SourceError

__all__ = [
    "SNAPSHOT_ID",
    "begin_planned_read",
    "export_snapshot",
    "idle_limit_s",
    "import_snapshot",
    "read_only",
    "snapshot_id",
]

_log = logging.getLogger(__name__)

SNAPSHOT_ID = re.compile(r"^[0-9A-F]+-[0-9A-F]+-[0-9]+$")
"""The shape of a ``pg_export_snapshot()`` id; anything else is refused before it reaches SQL."""

_GONE = "22023"  # invalid_parameter_value: "invalid snapshot identifier" once the exporter ended


def read_only(conn: sa.Connection) -> sa.Connection:
    """Make the connection's next transaction ``REPEATABLE READ READ ONLY`` (PostgreSQL)."""
    return conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)


def _current(conn: sa.Connection) -> str:
    return str(conn.execute(sa.select(sa.cast(sa.func.pg_current_snapshot(), sa.Text))).scalar_one())


def export_snapshot(conn: sa.Connection) -> str:
    """Export the transaction's snapshot; must be its first statement. Returns ``id|visibility``."""
    exported = sa.select(sa.func.pg_export_snapshot(), sa.cast(sa.func.pg_current_snapshot(), sa.Text))
    snapshot, visible = conn.execute(exported).one()
    return f"{snapshot}|{visible}"


def idle_limit_s(conn: sa.Connection) -> float | None:
    """This session's ``idle_in_transaction_session_timeout`` in seconds; None when it is off.

    The planning transaction sits idle while the shards run, holding the
    exported snapshot; a server that ends idle transactions sooner than the
    run lasts takes the snapshot with it, and later shards read at a fresh one.
    """
    found = conn.execute(
        sa.text("SELECT setting::bigint FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'")
    ).scalar()
    return None if not found else int(found) / 1000


def snapshot_id(snapshot: str) -> str:
    """The id to import from a stored ``id|visibility`` snapshot, checked against its shape."""
    sid = snapshot.partition("|")[0]
    if not SNAPSHOT_ID.match(sid):
        raise ConfigError(
            f"plan snapshot {snapshot!r} does not start with a pg_export_snapshot() id such as "
            "00000003-0000001B-1; use the plan as stored, or plan again"
        )
    return sid


def import_snapshot(conn: sa.Connection, snapshot: str) -> tuple[str, bool]:
    """Begin a read-only transaction at the plan's snapshot, or at a fresh one if it is gone.

    Returns ``(snapshot read, lost)``: the plan's snapshot and False, or the
    fresh transaction's ``pg_current_snapshot()`` and True.
    """
    sid = snapshot_id(snapshot)
    # SET TRANSACTION SNAPSHOT takes no bind parameters; the id is checked
    # above and rendered as a quoted literal by SQLAlchemy.
    statement = sa.text("SET TRANSACTION SNAPSHOT :sid").bindparams(
        sa.bindparam("sid", sid, type_=sa.String(), literal_execute=True)
    )
    transaction = read_only(conn).begin()
    try:
        conn.execute(statement)
    except sa.exc.DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) != _GONE:
            raise
        transaction.rollback()
        read_only(conn).begin()
        return _current(conn), True
    return snapshot, False


def begin_planned_read(
    conn: sa.Connection, snapshot: str | None, on_lost: str, shard_id: int, identity: str
) -> tuple[str | None, bool]:
    """Begin a shard's read on PostgreSQL at the plan's ``snapshot``: (snapshot read, lost?).

    A lost snapshot reads at a fresh one, logged, or with ``on_lost="error"`` is a :class:`SourceError`.
    """
    if snapshot is None:
        read_only(conn).begin()
        return None, False
    read, lost = import_snapshot(conn, snapshot)
    if lost and on_lost == "error":
        raise SourceError(
            f"the plan's snapshot {snapshot!r} is gone (its planning transaction ended), so shard "
            f"{shard_id} cannot be read as planned; plan again, or allow on_lost_snapshot='fresh'"
        )
    if lost:
        _log.warning(
            "snapshot %s is gone; shard %d of %s is read at a fresh snapshot %s",
            snapshot,
            shard_id,
            identity,
            read,
        )
    return read, lost
