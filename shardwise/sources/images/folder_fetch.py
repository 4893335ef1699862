"""One listed image object's bytes, checked against the ETag it was planned with.

A missing object, or one replaced since the plan listed it, is the row's
:class:`~shardwise.model.binary_value.BinaryValue` ``error`` (a dead letter), not a
failed shard: one image deleted or rewritten while a run goes on must not stop
the others, and a redrive of the dead letters reads the object as it is then.
A local file is opened only under the folder's own root (or a declared one)
and only if it is a regular file, as a reference is (a symlink in the folder
pointing out of it, or a FIFO named ``x.png``, is refused unread: see
:mod:`~shardwise.sources.images.local_read`); every read stops at the run's
byte cap and time bound.
Transient S3 failures are retried as the S3 stores retry them (the run's
retry policy) and, still failing at its deadline, raise
:class:`~shardwise.errors.RetryDeadlineError` (the shard fails).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from shardwise.errors import InputError
from shardwise.model.binary_value import BinaryValue
from shardwise.sources.files.local import local_etag
from shardwise.sources.files.objects import ObjectInfo
from shardwise.sources.images.access import ImageAccess
from shardwise.sources.images.capped import too_large
from shardwise.sources.images.local_read import open_under_roots, read_open_file

__all__ = ["fetch_local", "fetch_s3"]

_MISSING = frozenset({"NoSuchKey", "NoSuchBucket", "404", "NotFound"})
_CHANGED = frozenset({"PreconditionFailed", "412"})


def _changed(obj: ObjectInfo, now: str) -> BinaryValue:
    return BinaryValue(
        None,
        origin=obj.key,
        error=f"object changed since it was planned (etag {obj.etag!r}, now {now}); "
        "redrive to read it as it is",
    )


def fetch_local(obj: ObjectInfo, roots: Sequence[str], access: ImageAccess) -> BinaryValue:
    """The file's bytes, if it is a regular file under ``roots`` (the folder's own, resolved, and any
    declared) that still has the size and mtime it was listed with, within ``access``'s limits."""
    try:
        fd = open_under_roots(obj.key, roots)
        try:
            now = local_etag(os.fstat(fd))
            if now != obj.etag:
                return _changed(obj, repr(now))
            return BinaryValue(read_open_file(fd, access), origin=obj.key)
        finally:
            os.close(fd)
    except InputError as exc:
        return BinaryValue(None, origin=obj.key, error=str(exc))
    except (FileNotFoundError, NotADirectoryError):
        return BinaryValue(
            None, origin=obj.key, error=f"no such file {obj.key} (deleted since it was planned)"
        )
    except OSError as exc:
        return BinaryValue(None, origin=obj.key, error=f"cannot read file {obj.key}: {exc.strerror}")


class _Answer(Exception):
    """S3 answered for the row (missing, or changed): becomes its error."""

    def __init__(self, value: BinaryValue) -> None:
        super().__init__(value.error)
        self.value = value


def fetch_s3(store: Any, obj: ObjectInfo, access: ImageAccess) -> BinaryValue:
    """The object's bytes through ``store`` (an ``S3Store``), asked with ``If-Match`` its planned ETag;
    one listed over ``access``'s byte cap is refused without a GET."""
    from shardwise.sources.files.s3 import retried

    try:
        if obj.size > access.max_bytes:
            raise too_large(access, obj.size)
        data = retried(
            lambda: _get_once(store.client(), obj, access), store.retry, f"reading image {obj.key}"
        )
    except _Answer as answer:
        return answer.value
    except InputError as exc:
        return BinaryValue(None, origin=obj.key, error=str(exc))
    return BinaryValue(data, origin=obj.key)


def _get_once(client: Any, obj: ObjectInfo, access: ImageAccess) -> bytes:
    from botocore.exceptions import ClientError

    from shardwise.sources.files.s3 import parse_s3_url
    from shardwise.sources.files.s3_errors import s3_boundary
    from shardwise.sources.images.s3_get import read_body

    bucket, key = parse_s3_url(obj.key)
    with s3_boundary(f"reading image {obj.key}"):
        try:
            response = client.get_object(Bucket=bucket, Key=key, IfMatch=f'"{obj.etag}"')
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _MISSING:
                error = f"no such object {obj.key} (deleted since it was planned; S3 answered {code})"
                raise _Answer(BinaryValue(None, origin=obj.key, error=error)) from exc
            if code in _CHANGED:
                raise _Answer(_changed(obj, "another")) from exc
            raise
        return read_body(response, access)
