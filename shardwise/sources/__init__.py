"""Source adapters: SQL tables and Parquet datasets, planned into shards and read as streams.

The package exports the sources and how to open one; the types a source
deals in (``Shard``, ``SourceRow``, ``ReadFrom``, ``NewOnly``, ...) are
imported from :mod:`shardwise.sources.base`, their one home.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from shardwise.errors import ConfigError
from shardwise.lazy import lazy_exports
from shardwise.sources.base import Source, SourcePlan

if TYPE_CHECKING:
    from shardwise.sources.images.access import ImageAccess
    from shardwise.sources.images.folder import ImageFolderSource
    from shardwise.sources.keyed import KeyedSource, is_keyed
    from shardwise.sources.parquet.source import ParquetSource, plan_objects
    from shardwise.sources.sql.source import SqlSource

__all__ = [
    "ImageFolderSource",
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

__getattr__ = lazy_exports(
    __name__,
    {
        ".images.folder": ("ImageFolderSource",),
        ".keyed": ("KeyedSource", "is_keyed"),
        ".parquet.source": ("ParquetSource", "plan_objects"),
        ".sql.source": ("SqlSource",),
    },
)

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
    image_access: ImageAccess | None = None,
    image_folder: bool | None = None,
    query_timeout_s: float | None = None,
    **options: Any,
) -> SqlSource | ParquetSource | ImageFolderSource:
    """A SQL source for a database URL (``table`` required), else a Parquet source or an image folder
    for a path or ``s3://``.

    ``image_column`` reads that column as images instead of the text column (see
    :mod:`shardwise.sources.images`), its references only where ``image_access`` allows (by default
    no local path, and no bucket but an S3 source's own). Without it, a location whose listing holds
    image files and no Parquet files is an image folder
    (:class:`~shardwise.sources.images.folder.ImageFolderSource`: one row per
    image, keyed by its relative path); one holding both is refused. Deciding
    this lists the location once, unless ``image_folder`` says what it is (a worker knows it from the
    run's stored plan). ``query_timeout_s`` limits each query of a SQL source (None: its default, see
    :mod:`shardwise.sources.sql.timeout`); a Parquet source runs no queries, so it ignores it.
    """
    from shardwise.sources.images.folder import ImageFolderSource
    from shardwise.sources.parquet.source import ParquetSource
    from shardwise.sources.sql.source import SqlSource

    if is_sql_url(location):
        if not table:
            raise ConfigError(
                f"source {_scheme(location)}://... is a database, so a table is needed; pass --table NAME"
            )
        if query_timeout_s is not None:
            options["query_timeout_s"] = query_timeout_s
        return SqlSource(
            location, table, key, text_column, where,
            input_columns=input_columns, image_column=image_column, image_access=image_access,
            **options,
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
    if image_folder is None:
        image_folder = image_column is None and _is_image_folder(path, options.get("s3_client"))
    if image_folder:
        if key != "id" or text_column != "text" or input_columns:
            raise ConfigError(
                f"{path!r} is a folder of images: each row is one image keyed by its path in the folder, "
                "so it takes no --key, --text-column or input columns; drop them"
            )
        return ImageFolderSource(
            path, s3_client=options.get("s3_client"), retry=options.get("retry"), access=image_access
        )
    return ParquetSource(
        path, key, text_column, input_columns=input_columns, image_column=image_column,
        image_access=image_access, **options,
    )  # fmt: skip


def _is_image_folder(path: str, s3_client: Any | None) -> bool:
    """Whether ``path`` lists image objects and no Parquet ones; both is an ambiguous :class:`ConfigError`.

    A location that cannot be listed is left to the Parquet source, whose check says why.
    """
    from shardwise.errors import SourceError
    from shardwise.sources.parquet.objects import is_image_name, is_parquet_name
    from shardwise.sources.parquet.stores import open_store

    store = open_store(path, s3_client, names=lambda n: is_image_name(n) or is_parquet_name(n))
    try:
        names = [o.key for o in store.listing().objects]
    except SourceError:
        return False
    finally:
        store.close()  # closes only a client the store made itself
    images = sum(is_image_name(n) for n in names)
    if images and images < len(names):
        raise ConfigError(
            f"source {store.identity!r} holds both Parquet files ({len(names) - images}) and image files "
            f"({images}); to score the Parquet files' image column pass --image-column NAME, to score "
            "the image files give a folder or prefix that holds only them"
        )
    return images > 0


def _scheme(location: str) -> str:
    return location.split("://", 1)[0]
