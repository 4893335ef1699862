"""Which column type an embedding gets: ``--embedding-type auto|array|vector|halfvec`` against the database.

``auto``, ``vector`` and ``halfvec`` treat the extension alike: where it is
installed in the database they use it; where the server has it available but
the database has not created it yet, they create it (``CREATE EXTENSION
vector``); where the server does not have it, or this role may not create it,
``auto`` falls back to ``real[]`` (``array``) with a warning that says why,
and ``vector``/``halfvec`` are refused with one line that says why and names
the fix, never a silent fallback. A plain PostgreSQL or SQLite keeps working
unchanged under ``auto``.

The extension is created inside a SAVEPOINT of the caller's transaction:
pgvector is not a trusted extension, so most application roles may not
create it, and a refusal then rolls back to the savepoint (the transaction
goes on). With ``create=True`` a created extension is kept (the caller
commits its transaction); with ``create=False`` (a check before anything
runs, a dry run) it is created and rolled back at once, so the check gives
the answer the run will get, permission included, and creates nothing.
"""

from __future__ import annotations

import logging
from typing import Literal, get_args

import sqlalchemy as sa

from shardwise.db.errors import safe_url
from shardwise.errors import ConfigError
from shardwise.sinks.sql.options import EmbeddingType
from shardwise.sinks.sql.pgvector_types import MAX_DIMS

__all__ = ["EmbeddingType", "ResolvedEmbeddingType", "resolve_embedding_type"]

ResolvedEmbeddingType = Literal["array", "vector", "halfvec"]

_log = logging.getLogger(__name__)
_HALFVEC_SINCE = (0, 7)
_INSTALLED = sa.text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
_AVAILABLE = sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
_CREATE = sa.text("CREATE EXTENSION IF NOT EXISTS vector")


def resolve_embedding_type(
    conn: sa.Connection, requested: EmbeddingType, dim: int, *, create: bool
) -> ResolvedEmbeddingType:
    """The column type for ``dim``-dimensional embeddings on ``conn``'s database.

    ``auto`` → ``vector`` where pgvector is installed or may be created here
    (created when ``create``; with ``create=False`` only tried and rolled
    back), else ``array``; also ``array`` above pgvector's 16000 dimensions.
    ``vector``/``halfvec`` are created alike; where pgvector cannot be had,
    off PostgreSQL, or above 16000 dimensions → ConfigError naming the
    database (password hidden), why, and the fix.
    """
    if requested not in get_args(EmbeddingType):
        raise ConfigError(
            f"--embedding-type {requested!r} is not one of: {', '.join(get_args(EmbeddingType))}"
        )
    if dim < 1:
        raise ConfigError(f"an embedding has a positive number of dimensions; got {dim}")
    if requested == "array":
        return "array"
    where = safe_url(conn.engine.url)
    if conn.dialect.name != "postgresql":
        if requested == "auto":
            return "array"
        raise ConfigError(
            f"--embedding-type {requested} needs PostgreSQL with pgvector; {where} is "
            f"{conn.dialect.name}. Use --embedding-type array (or auto) there"
        )
    if dim > MAX_DIMS:
        if requested == "auto":
            _log.info("embeddings of %d dims exceed pgvector's %d; storing them as real[]", dim, MAX_DIMS)
            return "array"
        raise ConfigError(
            f"pgvector's {requested} columns hold at most {MAX_DIMS} dimensions; the model's embeddings "
            f"have {dim}. Use --embedding-type array (real[] has no such limit)"
        )
    version, why_not = _pgvector_version(conn, create=create)
    if version is None:
        if requested == "auto":
            if why_not and create:  # the run says it; its check before would only say it twice
                _log.warning(
                    "embeddings on %s fall back to real[]: %s. Run CREATE EXTENSION vector there once "
                    "as a superuser to store them as vector",
                    where,
                    why_not,
                )
            return "array"
        if why_not:
            raise ConfigError(
                f"--embedding-type {requested} needs the pgvector extension in {where}, which the server "
                f"has but this role could not create ({why_not}); run CREATE EXTENSION vector in that "
                "database once as a superuser, or use --embedding-type array"
            )
        raise ConfigError(
            f"--embedding-type {requested} needs the pgvector extension, which the server of {where} does "
            "not have (it is not in pg_available_extensions); install pgvector on the server (a run then "
            "runs CREATE EXTENSION vector itself where the role may), or use --embedding-type array"
        )
    if requested == "halfvec" and _version_tuple(version) < _HALFVEC_SINCE:
        raise ConfigError(
            f"--embedding-type halfvec needs pgvector 0.7 or later; {where} has {version}. "
            "Run ALTER EXTENSION vector UPDATE after upgrading pgvector, or use --embedding-type vector"
        )
    return "vector" if requested == "auto" else requested


def _pgvector_version(conn: sa.Connection, *, create: bool) -> tuple[str | None, str | None]:
    """(the pgvector version the run will have, or None; why it cannot, or None).

    Installed: its version. Available but not created: created in a
    SAVEPOINT, so that a refusal leaves the caller's transaction usable; kept
    when ``create``, rolled back at once when not (a check creates nothing).
    Not available on the server: (None, None).
    """
    version = conn.execute(_INSTALLED).scalar_one_or_none()
    if version is not None:
        return str(version), None
    if conn.execute(_AVAILABLE).first() is None:
        return None, None
    savepoint = conn.begin_nested()
    try:
        conn.execute(_CREATE)
        created = str(conn.execute(_INSTALLED).scalar_one())
    except sa.exc.DBAPIError as exc:
        savepoint.rollback()
        # Another run may have created it meanwhile (its CREATE waited for, then collided with, ours).
        version = conn.execute(_INSTALLED).scalar_one_or_none()
        if version is not None:
            return str(version), None
        first = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else type(exc).__name__
        return None, f"CREATE EXTENSION vector failed: {first}"
    if not create:
        savepoint.rollback()  # a check: the run creates it, in its own transaction
        return created, None
    savepoint.commit()
    _log.info("created the pgvector extension on %s", safe_url(conn.engine.url))
    return created, None


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)
