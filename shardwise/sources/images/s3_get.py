"""One whole S3 object, read with the S3 file sources' client and the run's retry policy: an image
column's reference, or an image folder's listed object, asked with ``If-Match`` its planned ETag.

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
than the read's time bound. So is a listed object deleted or replaced since
the plan: a redrive of the dead letters reads it as it is then.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from shardwise.errors import InputError
from shardwise.model.binary_value import BinaryValue
from shardwise.retry_policy import RetryPolicy
from shardwise.sources.files.objects import ObjectInfo
from shardwise.sources.files.s3 import parse_s3_url, retried
from shardwise.sources.files.s3_errors import s3_boundary
from shardwise.sources.images.access import ImageAccess
from shardwise.sources.images.capped import read_capped, too_large
from shardwise.sources.images.folder_fetch import changed_since_planned

__all__ = ["fetch_s3", "get_image", "read_body"]

_MISSING = frozenset({"NoSuchKey", "NoSuchBucket", "404", "NotFound"})
_CHANGED = frozenset({"PreconditionFailed", "412"})


class _Answer(Exception):
    """S3 answered for the row (missing, or changed): becomes its error."""

    def __init__(self, value: BinaryValue) -> None:
        super().__init__(value.error)
        self.value = value


def get_image(
    client: Any, ref: str, retry: RetryPolicy, access: ImageAccess | None = None,
    planned: ObjectInfo | None = None,
) -> BinaryValue:  # fmt: skip
    """The bytes of the object ``ref`` (``s3://bucket/key``), within ``access``'s byte cap and time bound,
    or an ``error`` saying it does not exist or was refused (by default: over 64 MiB). ``planned``, the
    object as listed, is asked for with ``If-Match`` its ETag: another version is the row's error too.

    Whether the bucket may be read at all is the caller's rule
    (:meth:`~shardwise.sources.images.access.ImageAccess.bucket_refusal`), checked before this is called.
    """
    access = access or ImageAccess()
    bucket, key = parse_s3_url(ref)
    if not key:
        return BinaryValue(None, origin=ref, error=f"no such object {ref} (the reference names no key)")
    try:
        data = retried(lambda: _get_once(client, bucket, key, access, planned), retry, f"reading image {ref}")
    except _Answer as answer:
        return answer.value
    except InputError as exc:
        return BinaryValue(None, origin=ref, error=str(exc))
    return BinaryValue(data, origin=ref)


def fetch_s3(store: Any, obj: ObjectInfo, access: ImageAccess) -> BinaryValue:
    """A listed object's bytes through ``store`` (an ``S3Store``), as planned (its ETag); one listed
    over ``access``'s byte cap is refused without a GET."""
    if obj.size > access.max_bytes:
        return BinaryValue(None, origin=obj.key, error=str(too_large(access, obj.size)))
    return get_image(store.client(), obj.key, store.retry, access, obj)


def read_body(response: Any, access: ImageAccess) -> bytes:
    """A GetObject response's body, refused unread when its ``ContentLength`` is over the cap, else read
    capped; botocore checks the length read against ``Content-Length`` once the body ends."""
    body = response["Body"]
    try:
        return read_capped(body.read, access, response.get("ContentLength"))
    finally:
        body.close()


def _get_once(client: Any, bucket: str, key: str, access: ImageAccess, planned: ObjectInfo | None) -> bytes:
    ref = f"s3://{bucket}/{key}"
    match = {} if planned is None else {"IfMatch": f'"{planned.etag}"'}
    with s3_boundary(f"reading image {ref}"):
        try:
            response = client.get_object(Bucket=bucket, Key=key, **match)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _MISSING:
                since = "" if planned is None else "deleted since it was planned; "
                error = f"no such object {ref} ({since}S3 answered {code})"
                raise _Answer(BinaryValue(None, origin=ref, error=error)) from exc
            if planned is not None and code in _CHANGED:
                raise _Answer(changed_since_planned(planned, "another")) from exc
            raise
        return read_body(response, access)
