"""The psycopg connection under a SQLAlchemy one.

LISTEN and the composed trigger DDL talk to psycopg 3 itself (``notifies()``,
``execute`` of a :mod:`psycopg.sql` composition), so their errors arrive
unwrapped by SQLAlchemy. The watchers run them inside their source's
:meth:`~shardwise.sources.sql.db.Database.errors`, which reads raw driver
errors and wrapped ones by the same table (:mod:`shardwise.db.errors`): a
watcher classifies an error exactly as a source and the store do.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

__all__ = ["driver"]


def driver(conn: sa.Connection) -> Any:
    """The :class:`psycopg.Connection` behind a SQLAlchemy connection."""
    return conn.connection.driver_connection
