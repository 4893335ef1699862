"""A source's image column: rows whose values become :class:`~shardwise.image_value.ImageValue` s.

Inline bytes are wrapped where they are; references are fetched in a small
thread pool of ``threads`` workers, up to ``threads * 4`` rows ahead of the
row being handed on, so reading stays ahead of the device while memory stays
bounded. Rows come out in the order they went in: a source's row order (and
so a resumed shard's ``ReadFrom``) does not change.

A fetch that fails for the row (a missing file or object) is that row's
``error``; a transient S3 failure that outlasted the run's retry deadline
raises :class:`~shardwise.errors.RetryDeadlineError` from the read, and the shard fails.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Generator, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from shardwise.errors import ConfigError
from shardwise.image_value import ImageValue
from shardwise.retry_policy import RetryPolicy
from shardwise.sources.base import SourceRow
from shardwise.sources.images.refs import inline_value, is_reference, read_local

__all__ = ["DEFAULT_FETCH_THREADS", "ImageColumn", "image_column_of"]

DEFAULT_FETCH_THREADS = 8
"""Fetches in flight per read: enough to hide S3 latency, few enough to stay polite to the store."""
_AHEAD_PER_THREAD = 4


class ImageColumn:
    """Turns a source's raw column values into ``ImageValue`` s, fetching references; thread-safe.

    S3 references go through one :class:`~shardwise.sources.parquet.s3_objects.S3Store`
    client, with the run's :class:`~shardwise.retry_policy.RetryPolicy`: the Parquet source's own
    store when it reads S3 (:meth:`share_store`), else one made on first use
    (``s3_client`` if given, else boto3's standard settings).
    """

    def __init__(
        self,
        name: str,
        *,
        s3_client: Any | None = None,
        threads: int = DEFAULT_FETCH_THREADS,
        retry: RetryPolicy | None = None,
    ) -> None:
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ConfigError(f"image fetch threads must be a positive integer; got {threads!r}")
        self.name, self._threads = name, threads
        self._s3_client, self._retry = s3_client, retry
        self._store: Any | None = None  # an S3Store, imported only when an s3:// reference is read
        self._owns_store = True
        self._lock = threading.Lock()

    def share_store(self, store: Any) -> None:
        """Fetch ``s3://`` references through ``store`` (an ``S3Store`` its source owns and closes)."""
        with self._lock:
            self._store, self._owns_store = store, False

    def value(self, raw: object) -> ImageValue:
        """One row's ``ImageValue``: inline bytes as they are, a reference fetched now."""
        if not is_reference(raw):
            return inline_value(raw)
        ref = str(raw)
        if ref.startswith("s3://"):
            from shardwise.sources.images.s3_get import get_image

            bucket = ref.removeprefix("s3://").split("/", 1)[0]
            if not bucket:
                return ImageValue(
                    None, origin=ref, error=f"no such object {ref} (the reference names no bucket)"
                )
            store = self._s3_store(bucket)
            return get_image(store.client(), ref, store.retry)
        return read_local(ref)

    def rows(self, rows: Iterator[SourceRow]) -> Generator[SourceRow, None, None]:
        """``rows`` with ``ImageValue`` values, in the same order, references fetched ahead in the pool.

        Closing the generator cancels the fetches not yet started.
        """
        pool = ThreadPoolExecutor(self._threads, thread_name_prefix=f"shardwise-image-{self.name}")
        pending: deque[tuple[SourceRow, Future[ImageValue]]] = deque()
        try:
            for row in rows:
                pending.append((row, self._submit(pool, row.value)))
                if len(pending) >= self._threads * _AHEAD_PER_THREAD:
                    yield _done(pending.popleft())
            while pending:
                yield _done(pending.popleft())
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        """Close the S3 client this column created, if any."""
        with self._lock:
            store, self._store = self._store, None
        if store is not None and self._owns_store:
            store.close()

    def _submit(self, pool: ThreadPoolExecutor, raw: object) -> Future[ImageValue]:
        if is_reference(raw):
            return pool.submit(self.value, raw)
        done: Future[ImageValue] = Future()
        done.set_result(inline_value(raw))
        return done

    def _s3_store(self, bucket: str) -> Any:
        with self._lock:
            if self._store is None:
                from shardwise.sources.parquet.s3_objects import S3Store

                # The store's bucket only names it; every GET names the reference's own bucket.
                self._store = S3Store(f"s3://{bucket}", self._s3_client, self._retry)
            return self._store


def _done(entry: tuple[SourceRow, Future[ImageValue]]) -> SourceRow:
    row, future = entry
    return SourceRow(row.key, future.result())


def image_column_of(
    image_column: str | None,
    text_column: str,
    input_columns: Mapping[str, str] | None,
    s3_client: Any | None,
    retry: RetryPolicy | None = None,
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
    return ImageColumn(image_column, s3_client=s3_client, retry=retry)
