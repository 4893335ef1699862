"""The psycopg connection under a SQLAlchemy one, and the errors it raises directly.

LISTEN and the composed trigger DDL talk to psycopg 3 itself (``notifies()``,
``execute`` of a :mod:`psycopg.sql` composition), so their errors arrive
unwrapped by SQLAlchemy. :func:`psycopg_errors` maps them onto
:mod:`shardwise.errors` with the store's classifier
(:func:`shardwise.results.dberrors.classify`): dropped connections and
servers shutting down are :class:`TransientError`, anything it does not
classify is a :class:`SourceError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import sqlalchemy as sa

from shardwise.errors import SourceError
from shardwise.results.dberrors import classify

__all__ = ["driver", "psycopg_errors"]


def driver(conn: sa.Connection) -> Any:
    """The :class:`psycopg.Connection` behind a SQLAlchemy connection."""
    return conn.connection.driver_connection


@contextmanager
def psycopg_errors(doing: str, where: str) -> Iterator[None]:
    """Re-raise psycopg errors from the block as Shardwise errors; ``where`` must hold no password."""
    try:
        yield
    except psycopg.Error as exc:
        mapped = classify(exc, doing, where)
        raise (mapped or SourceError(f"{doing} at {where} failed: {exc}")) from exc
