"""Which object store a file location names: S3 for ``s3://`` URLs, the local disk for paths.

Shared by every file source kind (Parquet, CSV and JSON Lines, image folders), the object
watcher and the location matching of :func:`shardwise.sources.open_source`, so that each
reads a location the same way.
"""

from __future__ import annotations

from typing import Any

from shardwise.errors import ConfigError
from shardwise.retry_policy import RetryPolicy
from shardwise.sources.files.local import LocalStore
from shardwise.sources.files.objects import ObjectStore

__all__ = ["on_this_host", "open_store"]


def open_store(
    location: str,
    s3_client: Any | None = None,
    suffixes: tuple[str, ...] | None = None,
    retry: RetryPolicy | None = None,
) -> ObjectStore:
    """The object store for ``location``: S3 for ``s3://`` URLs, the local disk for paths. Does no I/O.

    ``suffixes`` says which listed names it reads (a kind's file suffixes; every name without them);
    ``retry`` is the run's policy for S3 reads (see :mod:`shardwise.retry_policy`).
    """
    if not isinstance(location, str) or not location:
        raise ConfigError(f"a file location must be a path, glob or s3:// URL, got {location!r}")
    if not on_this_host(location):
        from shardwise.sources.files.s3 import S3Store  # imports botocore: only when S3 is used

        return S3Store(location, s3_client, retry, suffixes=suffixes)
    if "://" in location:
        raise ConfigError(
            f"location {location!r} uses an unsupported scheme; "
            "use s3://bucket/prefix or a local path (folder, file or glob)"
        )
    return LocalStore(location, suffixes)


def on_this_host(location: str) -> bool:
    """Whether only this host reaches the files at ``location``: a local path does, an ``s3://`` prefix is
    reached from any host."""
    return not location.startswith("s3://")
