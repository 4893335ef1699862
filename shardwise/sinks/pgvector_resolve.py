"""Which column type an embedding gets: ``--embedding-type auto|array|vector|halfvec`` against the database.

``auto`` picks pgvector's ``vector`` where the database has the extension,
and ``real[]`` (``array``) where it has not, so a plain PostgreSQL or SQLite
keeps working unchanged. Asking for ``vector`` or ``halfvec`` where pgvector
is missing is an error that names the fix, never a silent fallback.

With ``create=True`` an extension that is available but not installed is
created, inside a SAVEPOINT of the caller's transaction: pgvector is not a
trusted extension, so most application roles may not create it, and a
refusal then rolls back to the savepoint (the transaction goes on) and is
logged. The caller commits its transaction to keep a created extension.
"""

from __future__ import annotations

import logging
from typing import Literal, get_args

import sqlalchemy as sa

from shardwise.dberrors import safe_url
from shardwise.errors import ConfigError
from shardwise.sinks.pgvector_types import MAX_DIMS

__all__ = ["EmbeddingType", "ResolvedEmbeddingType", "resolve_embedding_type"]

EmbeddingType = Literal["auto", "array", "vector", "halfvec"]
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

    ``auto`` → ``vector`` with pgvector (created first when ``create`` and the
    role may), else ``array``; also ``array`` above pgvector's 16000 dimensions.
    ``vector``/``halfvec`` without pgvector, off PostgreSQL, or above 16000
    dimensions → ConfigError naming the database (password hidden) and the fix.
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
            if why_not:
                _log.warning(
                    "embeddings on %s fall back to real[]: %s. Run CREATE EXTENSION vector there once "
                    "as a superuser to store them as vector",
                    where,
                    why_not,
                )
            return "array"
        raise ConfigError(
            f"--embedding-type {requested} needs the pgvector extension, which {where} does not have"
            f"{f' ({why_not})' if why_not else ''}. Install pgvector on the server and run "
            "CREATE EXTENSION vector in this database as a superuser, or use --embedding-type array"
        )
    if requested == "halfvec" and _version_tuple(version) < _HALFVEC_SINCE:
        raise ConfigError(
            f"--embedding-type halfvec needs pgvector 0.7 or later; {where} has {version}. "
            "Run ALTER EXTENSION vector UPDATE after upgrading pgvector, or use --embedding-type vector"
        )
    return "vector" if requested == "auto" else requested


def _pgvector_version(conn: sa.Connection, *, create: bool) -> tuple[str | None, str | None]:
    """(installed pgvector version or None, why creating it failed or None).

    With ``create``, an available extension is created first, in a SAVEPOINT
    so that a refusal leaves the caller's transaction usable.
    """
    version = conn.execute(_INSTALLED).scalar_one_or_none()
    if version is not None or not create:
        return (None if version is None else str(version)), None
    if conn.execute(_AVAILABLE).first() is None:
        return None, None
    try:
        with conn.begin_nested():
            conn.execute(_CREATE)
    except sa.exc.DBAPIError as exc:
        first = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else type(exc).__name__
        return None, f"CREATE EXTENSION vector failed: {first}"
    _log.info("created the pgvector extension on %s", safe_url(conn.engine.url))
    return str(conn.execute(_INSTALLED).scalar_one()), None


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)
