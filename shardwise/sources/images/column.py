"""A source's image column: rows whose values become :class:`~shardwise.model.binary_value.BinaryValue` s.

Inline bytes are wrapped where they are; references are fetched a few rows
ahead on ``threads`` threads, in row order (see
:mod:`~shardwise.sources.images.fetch_ahead`), each only where the run's
:class:`~shardwise.sources.images.access.ImageAccess` allows: a local path
under a declared root, an ``s3://`` object in the source's own bucket or an
allowed one, within the byte cap and the time bound. A refused reference is
never opened or fetched; its row holds only the reason.

A fetch that fails for the row (a missing file or object, a refusal) is that
row's ``error``; a transient S3 failure that outlasted the run's retry
deadline raises :class:`~shardwise.errors.RetryDeadlineError` from the read,
and the shard fails.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator, Mapping
from typing import Any

from shardwise.errors import ConfigError
from shardwise.model.binary_value import BinaryValue
from shardwise.retry_policy import RetryPolicy
from shardwise.sources.base import SourceRow
from shardwise.sources.images.access import ImageAccess
from shardwise.sources.images.fetch_ahead import Fetch, fetched_in_order
from shardwise.sources.images.local_read import resolved_roots
from shardwise.sources.images.refs import inline_value, is_reference, read_local

__all__ = ["DEFAULT_FETCH_THREADS", "ImageColumn", "image_column_of", "local_limit_s"]

DEFAULT_FETCH_THREADS = 8
"""Fetches in flight per read: enough to hide S3 latency, few enough to stay polite to the store."""
_HUNG_GRACE_S = 5.0


def local_limit_s(access: ImageAccess) -> float:
    """How long a local read may run before its thread is given up (a hung mount): the time bound, and a
    few seconds more, since the bound is checked between pieces."""
    return access.read_timeout_s + _HUNG_GRACE_S


class ImageColumn:
    """Turns a source's raw column values into ``BinaryValue`` s, fetching references; thread-safe.

    ``access`` says which references may be read and how much of each (by
    default: no local path, no bucket but the source's own, 64 MiB). S3
    references go through one :class:`~shardwise.sources.files.s3.S3Store`
    client, with the run's :class:`~shardwise.retry_policy.RetryPolicy`: the Parquet source's own
    store when it reads S3 (:meth:`share_store`, which makes its bucket the source's own), else one
    made on first use (``s3_client`` if given, else boto3's standard settings).
    """

    def __init__(
        self,
        name: str,
        *,
        access: ImageAccess | None = None,
        s3_client: Any | None = None,
        threads: int = DEFAULT_FETCH_THREADS,
        retry: RetryPolicy | None = None,
    ) -> None:
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ConfigError(f"image fetch threads must be a positive integer; got {threads!r}")
        if access is not None and not isinstance(access, ImageAccess):
            raise ConfigError(f"image access must be an ImageAccess; got {access!r}")
        self.name, self._threads = name, threads
        self.access = access or ImageAccess()
        self._roots: tuple[str, ...] | None = None  # resolved on the host that reads, on first use
        self._own_bucket: str | None = None
        self._s3_client, self._retry = s3_client, retry
        self._store: Any | None = None  # an S3Store, imported only when an s3:// reference is read
        self._owns_store = True
        self._lock = threading.Lock()

    def share_store(self, store: Any) -> None:
        """Fetch ``s3://`` references through ``store`` (an ``S3Store`` its source owns and closes),
        whose bucket is the source's own: references into it may be read."""
        with self._lock:
            self._store, self._owns_store = store, False
            self._own_bucket = str(store.identity).removeprefix("s3://").split("/", 1)[0]

    def value(self, raw: object) -> BinaryValue:
        """One row's ``BinaryValue``: inline bytes as they are, a reference fetched now if it may be."""
        if not is_reference(raw):
            return inline_value(raw)
        ref = str(raw)
        if ref.startswith("s3://"):
            from shardwise.sources.images.s3_get import get_image

            bucket = ref.removeprefix("s3://").split("/", 1)[0]
            if not bucket:
                return BinaryValue(
                    None, origin=ref, error=f"no such object {ref} (the reference names no bucket)"
                )
            refused = self.access.bucket_refusal(bucket, self._own_bucket)
            if refused is not None:
                return BinaryValue(None, origin=ref, error=refused)
            store = self._s3_store(bucket)
            return get_image(store.client(), ref, store.retry, self.access)
        return read_local(ref, self._resolved_roots(), self.access)

    def rows(self, rows: Iterator[SourceRow]) -> Generator[SourceRow, None, None]:
        """``rows`` with ``BinaryValue`` values, in the same order, references fetched ahead.

        Closing the generator cancels the fetches not yet started.
        """
        items = ((row.key, self._fetch(row.value)) for row in rows)
        fetched = fetched_in_order(items, threads=self._threads, name=f"shardwise-image-{self.name}")
        try:
            for key, value in fetched:
                yield SourceRow(key, value)
        finally:
            fetched.close()

    def close(self) -> None:
        """Close the S3 client this column created, if any."""
        with self._lock:
            store, self._store = self._store, None
        if store is not None and self._owns_store:
            store.close()

    def _fetch(self, raw: object) -> Fetch | BinaryValue:
        if not is_reference(raw):
            return inline_value(raw)
        ref = str(raw)
        limit = None if ref.startswith("s3://") else local_limit_s(self.access)
        return Fetch(lambda: self.value(raw), ref, limit)

    def _resolved_roots(self) -> tuple[str, ...]:
        with self._lock:
            if self._roots is None:
                self._roots = resolved_roots(self.access.roots)
            return self._roots

    def _s3_store(self, bucket: str) -> Any:
        with self._lock:
            if self._store is None:
                from shardwise.sources.files.s3 import S3Store

                # The store's bucket only names it; every GET names the reference's own bucket.
                self._store = S3Store(f"s3://{bucket}", self._s3_client, self._retry)
            return self._store


def image_column_of(
    image_column: str | None,
    text_column: str,
    input_columns: Mapping[str, str] | None,
    s3_client: Any | None,
    retry: RetryPolicy | None = None,
    access: ImageAccess | None = None,
) -> ImageColumn | None:
    """A source's :class:`ImageColumn`, or None for a text source; an image column replaces the text.

    It takes no other text column and no other input columns: each row is one image.
    """
    if image_column is None:
        return None
    if not isinstance(image_column, str) or not image_column:
        raise ConfigError(f"image_column must name a column; got {image_column!r}")
    if text_column != "text" or input_columns:
        raise ConfigError(
            f"image column {image_column!r} replaces the text column, so it takes no text_column "
            f"({text_column!r}) or input columns ({', '.join(input_columns or {}) or 'none'}); drop them"
        )
    return ImageColumn(image_column, access=access, s3_client=s3_client, retry=retry)
