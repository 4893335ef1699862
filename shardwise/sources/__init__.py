"""Source adapters: SQL tables, Parquet, CSV and JSON Lines files and image folders, planned into shards
and read as streams; each kind is registered under the ``shardwise.sources`` entry points.

The package exports the sources and how to open one; the types a source
deals in (``Shard``, ``SourceRow``, ``ReadFrom``, ``NewOnly``, ...) are
imported from :mod:`shardwise.sources.base`, their one home.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from shardwise.lazy import lazy_exports
from shardwise.sources.base import Source, SourcePlan

if TYPE_CHECKING:
    from shardwise.retry_policy import RetryPolicy
    from shardwise.sources.files.spans import plan_objects
    from shardwise.sources.images.access import ImageAccess
    from shardwise.sources.images.folder import ImageFolderSource
    from shardwise.sources.keyed import KeyedSource, is_keyed
    from shardwise.sources.parquet.source import ParquetSource
    from shardwise.sources.sql.source import SqlSource

__all__ = [
    "ImageFolderSource",
    "KeyedSource",
    "ParquetSource",
    "Source",
    "SourcePlan",
    "SqlSource",
    "is_keyed",
    "open_source",
    "plan_objects",
]

__getattr__ = lazy_exports(
    __name__,
    {
        ".images.folder": ("ImageFolderSource",),
        ".files.spans": ("plan_objects",),
        ".keyed": ("KeyedSource", "is_keyed"),
        ".parquet.source": ("ParquetSource",),
        ".sql.source": ("SqlSource",),
    },
)


def open_source(
    location: str,
    *,
    table: str | None = None,
    key: str = "id",
    text_column: str = "text",
    input_columns: Mapping[str, str] | None = None,
    image_column: str | None = None,
    image_access: ImageAccess | None = None,
    kind: str | None = None,
    kind_options: Mapping[str, Any] | None = None,
    s3_client: Any | None = None,
    retry: RetryPolicy | None = None,
    **options: Any,
) -> Source:
    """The source for ``location``, of the registered kind that claims it (:mod:`shardwise.sources.registry`).

    A database URL (``postgresql+psycopg://...``, ``sqlite:///...``; ``table``
    required) goes to the kind claiming its scheme. A path, glob, ``file://``
    or ``s3://`` location is listed once and goes to the kind whose suffixes
    its files have: Parquet, CSV and JSON Lines, or images (an image folder:
    one row per image, keyed by its relative path); files of two kinds are
    refused. ``image_column`` reads that column as images instead of the text
    column (see :mod:`shardwise.sources.images`), its references only where
    ``image_access`` allows; with it, no location is an image folder.
    ``kind`` names the kind outright (a worker knows it from the run's stored
    plan), so nothing is listed. ``kind_options`` are the kinds' own options, a
    section per kind (``{"sql": {"where": "id > 3"}}``): the kind opened takes
    its own, and another kind's is refused.
    """
    from shardwise.sources import registry

    sections = dict(registry.source_sections(kind_options or {}))
    given = registry.SourceOptions(
        table=table, key=key, text_column=text_column, input_columns=input_columns,
        image_column=image_column, image_access=image_access, kind_options=sections,
        s3_client=s3_client, retry=retry, more=options,
    )  # fmt: skip
    if kind is not None:
        return registry.open_kind(registry.source_kind(kind), location.removeprefix("file://"), given)
    return registry.open_location(location, given, lambda path: _listed(path, s3_client))


def _listed(path: str, s3_client: Any | None) -> list[str]:
    """The names of the files at ``path``; one listing."""
    from shardwise.sources.files.stores import open_store

    store = open_store(path, s3_client)
    try:
        return [o.key for o in store.listing().objects]
    finally:
        store.close()  # closes only a client the store made itself
