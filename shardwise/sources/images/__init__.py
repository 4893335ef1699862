"""Image columns: each row's stored bytes, or the file or S3 object its reference names, as an BinaryValue.

:class:`ImageColumn` is what a SQL or Parquet source reading ``--image-column``
wraps its rows in; see :mod:`shardwise.sources.images.column`. Which
references it may read, and how much of each, is the run's
:class:`ImageAccess` (see :mod:`shardwise.sources.images.access`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardwise.lazy import lazy_exports

if TYPE_CHECKING:
    from shardwise.sources.images.access import DEFAULT_MAX_BYTES, ImageAccess
    from shardwise.sources.images.column import DEFAULT_FETCH_THREADS, ImageColumn, image_column_of
    from shardwise.sources.images.refs import is_reference, local_path

__all__ = [
    "DEFAULT_FETCH_THREADS",
    "DEFAULT_MAX_BYTES",
    "ImageAccess",
    "ImageColumn",
    "image_column_of",
    "is_reference",
    "local_path",
]

__getattr__ = lazy_exports(
    __name__,
    {
        ".access": ("DEFAULT_MAX_BYTES", "ImageAccess"),
        ".column": ("DEFAULT_FETCH_THREADS", "ImageColumn", "image_column_of"),
        ".refs": ("is_reference", "local_path"),
    },
)
