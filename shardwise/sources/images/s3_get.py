"""One whole S3 object, read with the S3 Parquet sources' client and the run's retry policy.

The client is :meth:`S3Store.client` (one per source, boto3's standard
settings: environment, profile, ``AWS_ENDPOINT_URL``), so an image column
reads S3 exactly as a Parquet source does. botocore retries each request; a
body cut while it streams, or an answer botocore gave up on, is asked again
by :func:`~shardwise.sources.files.s3.retried` until the run's
retry deadline, and still failing is a
:class:`~shardwise.errors.RetryDeadlineError`, which fails the shard. A
missing object or bucket is an answer, not a failure: the row's
:class:`~shardwise.model.binary_value.BinaryValue` says so. So is an object over the
run's byte cap (its ``Content-Length`` is checked before the body is read,
and the body is read no further than the cap) or one whose body takes longer
than the read's time bound.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from shardwise.errors import InputError
from shardwise.model.binary_value import BinaryValue
from shardwise.retry_policy import RetryPolicy
from shardwise.sources.files.s3 import parse_s3_url, retried
from shardwise.sources.files.s3_errors import s3_boundary
from shardwise.sources.images.access import ImageAccess
from shardwise.sources.images.capped import read_capped

__all__ = ["get_image", "read_body"]

_MISSING = frozenset({"NoSuchKey", "NoSuchBucket", "404", "NotFound"})


class _Missing(Exception):
    """The object is not there: becomes the row's error."""


def get_image(client: Any, ref: str, retry: RetryPolicy, access: ImageAccess | None = None) -> BinaryValue:
    """The bytes of the object ``ref`` (``s3://bucket/key``), within ``access``'s byte cap and time bound,
    or an ``error`` saying it does not exist or was refused (by default: over 64 MiB).

    Whether the bucket may be read at all is the caller's rule
    (:meth:`~shardwise.sources.images.access.ImageAccess.bucket_refusal`), checked before this is called.
    """
    access = access or ImageAccess()
    bucket, key = parse_s3_url(ref)
    if not key:
        return BinaryValue(None, origin=ref, error=f"no such object {ref} (the reference names no key)")
    try:
        data = retried(lambda: _get_once(client, bucket, key, ref, access), retry, f"reading image {ref}")
    except _Missing as exc:
        return BinaryValue(None, origin=ref, error=f"no such object {ref} (S3 answered {exc})")
    except InputError as exc:
        return BinaryValue(None, origin=ref, error=str(exc))
    return BinaryValue(data, origin=ref)


def read_body(response: Any, access: ImageAccess) -> bytes:
    """A GetObject response's body, refused unread when its ``ContentLength`` is over the cap, else read
    capped; botocore checks the length read against ``Content-Length`` once the body ends."""
    body = response["Body"]
    try:
        return read_capped(body.read, access, response.get("ContentLength"))
    finally:
        body.close()


def _get_once(client: Any, bucket: str, key: str, ref: str, access: ImageAccess) -> bytes:
    with s3_boundary(f"reading image {ref}"):
        try:
            response = client.get_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _MISSING:
                raise _Missing(code) from exc
            raise
        return read_body(response, access)
