"""Which object store a Parquet (or image) location names: S3 for ``s3://`` URLs, the local disk for paths.

Shared by the Parquet source, the image folder source and the object watcher, so that each reads a
location the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shardwise.errors import ConfigError
from shardwise.retry_policy import RetryPolicy
from shardwise.sources.parquet.local_objects import LocalStore
from shardwise.sources.parquet.objects import ObjectStore, is_parquet_name

__all__ = ["open_store"]


def open_store(
    location: str,
    s3_client: Any | None = None,
    names: Callable[[str], bool] = is_parquet_name,
    retry: RetryPolicy | None = None,
) -> ObjectStore:
    """The object store for ``location``: S3 for ``s3://`` URLs, the local disk for paths. Does no I/O.

    ``names`` says which listed names it reads (Parquet files; an image folder passes its own);
    ``retry`` is the run's policy for S3 reads (see :mod:`shardwise.retry_policy`).
    """
    if not isinstance(location, str) or not location:
        raise ConfigError(f"a Parquet location must be a path, glob or s3:// URL, got {location!r}")
    if location.startswith("s3://"):
        from shardwise.sources.parquet.s3_objects import S3Store  # imports botocore: only when S3 is used

        return S3Store(location, s3_client, retry, names=names)
    if "://" in location:
        raise ConfigError(
            f"Parquet location {location!r} uses an unsupported scheme; "
            "use s3://bucket/prefix or a local path (folder, file or glob)"
        )
    return LocalStore(location, names)
