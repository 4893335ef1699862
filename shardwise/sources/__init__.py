"""Source adapters: SQL tables and Parquet datasets, planned into shards and read as streams.

The package exports the sources and how to open one; the types a source
deals in (``Shard``, ``SourceRow``, ``ReadFrom``, ``NewOnly``, ...) are
imported from :mod:`shardwise.sources.base`, their one home.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardwise.errors import ConfigError
from shardwise.sources.base import Source, SourcePlan
from shardwise.sources.keyed import KeyedSource, is_keyed
from shardwise.sources.parquet.source import ParquetSource, plan_objects
from shardwise.sources.sql.source import SqlSource

__all__ = [
    "KeyedSource",
    "ParquetSource",
    "Source",
    "SourcePlan",
    "SqlSource",
    "is_keyed",
    "is_sql_url",
    "open_source",
    "plan_objects",
]

_SQL_SCHEMES = ("postgresql", "postgres", "sqlite")


def is_sql_url(location: str) -> bool:
    """True for a SQLAlchemy URL (``postgresql+psycopg://...``, ``sqlite:///...``)."""
    scheme = location.split("://", 1)[0].split("+", 1)[0].lower() if "://" in location else ""
    return scheme in _SQL_SCHEMES


def open_source(
    location: str,
    *,
    table: str | None = None,
    key: str = "id",
    text_column: str = "text",
    input_columns: Mapping[str, str] | None = None,
    where: str | None = None,
    image_column: str | None = None,
    **options: Any,
) -> SqlSource | ParquetSource:
    """A SQL source for a database URL (``table`` required), else a Parquet source for a path or ``s3://``.

    ``image_column`` reads that column as images instead of the text column (see
    :mod:`shardwise.sources.images`).
    """
    if is_sql_url(location):
        if not table:
            raise ConfigError(
                f"source {_scheme(location)}://... is a database, so a table is needed; pass --table NAME"
            )
        return SqlSource(
            location, table, key, text_column, where,
            input_columns=input_columns, image_column=image_column, **options,
        )  # fmt: skip
    if "://" in location and not location.startswith(("s3://", "file://")):
        raise ConfigError(
            f"source scheme {_scheme(location)!r} is not supported; use postgresql+psycopg://, sqlite:///, "
            "s3://bucket/prefix, or a local path"
        )
    if table is not None or where is not None:
        raise ConfigError(
            "table and where apply to SQL sources only; a Parquet source is read whole (drop --table/--where)"
        )
    path = location.removeprefix("file://")
    return ParquetSource(
        path, key, text_column, input_columns=input_columns, image_column=image_column, **options
    )


def _scheme(location: str) -> str:
    return location.split("://", 1)[0]
