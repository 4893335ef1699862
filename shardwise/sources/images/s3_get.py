"""One whole S3 object, read with the S3 Parquet sources' client and the run's retry policy.

The client is :meth:`S3Store.client` (one per source, boto3's standard
settings: environment, profile, ``AWS_ENDPOINT_URL``), so an image column
reads S3 exactly as a Parquet source does. botocore retries each request; a
body cut while it streams, or an answer botocore gave up on, is asked again
by :func:`~shardwise.sources.parquet.s3_objects.retried` until the run's
retry deadline, and still failing is a
:class:`~shardwise.errors.RetryDeadlineError`, which fails the shard. A
missing object or bucket is an answer, not a failure: the row's
:class:`~shardwise.image_value.ImageValue` says so.
"""

from __future__ import annotations

from typing import Any, cast

from botocore.exceptions import ClientError

from shardwise.image_value import ImageValue
from shardwise.retry_policy import RetryPolicy
from shardwise.sources.parquet.s3_errors import s3_boundary
from shardwise.sources.parquet.s3_objects import parse_s3_url, retried

__all__ = ["get_image"]

_MISSING = frozenset({"NoSuchKey", "NoSuchBucket", "404", "NotFound"})


class _Missing(Exception):
    """The object is not there: becomes the row's error."""


def get_image(client: Any, ref: str, retry: RetryPolicy) -> ImageValue:
    """The bytes of the object ``ref`` (``s3://bucket/key``), or an ``error`` saying it does not exist."""
    bucket, key = parse_s3_url(ref)
    if not key:
        return ImageValue(None, origin=ref, error=f"no such object {ref} (the reference names no key)")
    try:
        data = retried(lambda: _get_once(client, bucket, key, ref), retry, f"reading image {ref}")
    except _Missing as exc:
        return ImageValue(None, origin=ref, error=f"no such object {ref} (S3 answered {exc})")
    return ImageValue(data, origin=ref)


def _get_once(client: Any, bucket: str, key: str, ref: str) -> bytes:
    with s3_boundary(f"reading image {ref}"):
        try:
            response = client.get_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _MISSING:
                raise _Missing(code) from exc
            raise
        body = response["Body"]
        try:
            return cast(bytes, body.read())  # botocore checks the length against Content-Length
        finally:
            body.close()
