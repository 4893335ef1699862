"""One listed image file's bytes, checked against the ETag it was planned with (an S3 object's: see
:func:`~shardwise.sources.images.s3_get.fetch_s3`).

A missing object, or one replaced since the plan listed it, is the row's
:class:`~shardwise.model.binary_value.BinaryValue` ``error`` (a dead letter), not a
failed shard: one image deleted or rewritten while a run goes on must not stop
the others, and a redrive of the dead letters reads the object as it is then.
A local file is opened only under the folder's own root (or a declared one)
and only if it is a regular file, as a reference is (a symlink in the folder
pointing out of it, or a FIFO named ``x.png``, is refused unread: see
:mod:`~shardwise.sources.images.local_read`); every read stops at the run's
byte cap and time bound.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from shardwise.errors import InputError
from shardwise.model.binary_value import BinaryValue
from shardwise.sources.files.local import local_etag
from shardwise.sources.files.objects import ObjectInfo
from shardwise.sources.images.access import ImageAccess
from shardwise.sources.images.local_read import open_under_roots, read_open_file

__all__ = ["changed_since_planned", "fetch_local"]


def changed_since_planned(obj: ObjectInfo, now: str) -> BinaryValue:
    """The row of an object replaced since the plan listed it: ``now`` says what it is instead."""
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
                return changed_since_planned(obj, repr(now))
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
