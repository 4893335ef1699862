"""One listed image object's bytes, checked against the ETag it was planned with.

A missing object, or one replaced since the plan listed it, is the row's
:class:`~shardwise.image_value.ImageValue` ``error`` (a dead letter), not a
failed shard: one image deleted or rewritten while a run goes on must not stop
the others, and a redrive of the dead letters reads the object as it is then.
Transient S3 failures are retried as the S3 stores retry them (the run's
retry policy) and, still failing at its deadline, raise
:class:`~shardwise.errors.RetryDeadlineError` (the shard fails).
"""

from __future__ import annotations

import os
from typing import Any, cast

from shardwise.image_value import ImageValue
from shardwise.sources.parquet.local_objects import local_etag
from shardwise.sources.parquet.objects import ObjectInfo

__all__ = ["fetch_local", "fetch_s3"]

_MISSING = frozenset({"NoSuchKey", "NoSuchBucket", "404", "NotFound"})
_CHANGED = frozenset({"PreconditionFailed", "412"})


def _changed(obj: ObjectInfo, now: str) -> ImageValue:
    return ImageValue(
        None,
        origin=obj.key,
        error=f"object changed since it was planned (etag {obj.etag!r}, now {now}); "
        "redrive to read it as it is",
    )


def fetch_local(obj: ObjectInfo) -> ImageValue:
    """The file's bytes, if it still has the size and mtime it was listed with."""
    try:
        with open(obj.key, "rb") as handle:
            now = local_etag(os.fstat(handle.fileno()))
            if now != obj.etag:
                return _changed(obj, repr(now))
            return ImageValue(handle.read(), origin=obj.key)
    except FileNotFoundError:
        return ImageValue(
            None, origin=obj.key, error=f"no such file {obj.key} (deleted since it was planned)"
        )
    except OSError as exc:
        return ImageValue(None, origin=obj.key, error=f"cannot read file {obj.key}: {exc.strerror}")


class _Answer(Exception):
    """S3 answered for the row (missing, or changed): becomes its error."""

    def __init__(self, value: ImageValue) -> None:
        super().__init__(value.error)
        self.value = value


def fetch_s3(store: Any, obj: ObjectInfo) -> ImageValue:
    """The object's bytes through ``store`` (an ``S3Store``), asked with ``If-Match`` its planned ETag."""
    from shardwise.sources.parquet.s3_objects import retried

    try:
        data = retried(lambda: _get_once(store.client(), obj), store.retry, f"reading image {obj.key}")
    except _Answer as answer:
        return answer.value
    return ImageValue(data, origin=obj.key)


def _get_once(client: Any, obj: ObjectInfo) -> bytes:
    from botocore.exceptions import ClientError

    from shardwise.sources.parquet.s3_errors import s3_boundary
    from shardwise.sources.parquet.s3_objects import parse_s3_url

    bucket, key = parse_s3_url(obj.key)
    with s3_boundary(f"reading image {obj.key}"):
        try:
            response = client.get_object(Bucket=bucket, Key=key, IfMatch=f'"{obj.etag}"')
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _MISSING:
                error = f"no such object {obj.key} (deleted since it was planned; S3 answered {code})"
                raise _Answer(ImageValue(None, origin=obj.key, error=error)) from exc
            if code in _CHANGED:
                raise _Answer(_changed(obj, "another")) from exc
            raise
        body = response["Body"]
        try:
            return cast(bytes, body.read())
        finally:
            body.close()
