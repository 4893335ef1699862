"""What an image column's value is: inline bytes, a reference to fetch, or a row that cannot be an image.

A value is read as the column holds it: bytes (PostgreSQL ``bytea``, SQLite
``BLOB``, Parquet binary) are the image; a string is a *reference*: a local
path (absolute, or relative to the worker's working directory), a
``file://`` URI, or an ``s3://bucket/key`` URI, read only where the run's
:class:`~shardwise.sources.images.access.ImageAccess` allows. Everything
else, NULL included, becomes an :class:`~shardwise.model.binary_value.BinaryValue`
with an ``error``, which the model dead-letters: one bad row never fails a
shard.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from urllib.parse import unquote, urlsplit

from shardwise.errors import InputError
from shardwise.model.binary_value import BinaryValue
from shardwise.sources.images.access import ImageAccess
from shardwise.sources.images.local_read import open_under_roots, read_open_file

__all__ = ["inline_value", "is_reference", "local_path", "read_local"]

_SCHEMES = ("s3://", "file://")


def is_reference(raw: object) -> bool:
    """Whether ``raw`` names an image to fetch (any non-empty string) rather than holding one."""
    return isinstance(raw, str) and bool(raw)


def inline_value(raw: object) -> BinaryValue:
    """The :class:`BinaryValue` of a value that is not a reference: its bytes, or why it is no image."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return BinaryValue(bytes(raw))
    if raw is None:
        return BinaryValue(None, error="NULL image")
    if isinstance(raw, str):
        return BinaryValue(None, error="empty image reference; give bytes, a path, file:// or s3:// URI")
    return BinaryValue(
        None,
        error=f"image value of type {type(raw).__name__} is neither bytes nor a reference (a path, "
        "file:// or s3:// URI); store the image's bytes or where it is",
    )


def local_path(ref: str) -> str | None:
    """The file a local reference names (a path, or a ``file://`` URI); None for another scheme."""
    if ref.startswith("file://"):
        parts = urlsplit(ref)
        return unquote(parts.path) if parts.netloc in ("", "localhost") else None
    return None if "://" in ref else ref


def read_local(ref: str, roots: Sequence[str], access: ImageAccess) -> BinaryValue:
    """The bytes of the local file ``ref`` names, if it is a regular file under one of the resolved ``roots``.

    A refused, missing or unreadable file is the value's ``error`` (see
    :mod:`~shardwise.sources.images.local_read`): nothing of a refused file is read.
    """
    path = local_path(ref)
    if path is None:
        scheme = ref.split("://", 1)[0]
        if scheme == "file":
            error = (
                f"file:// URI names host {urlsplit(ref).netloc!r}; only this host's files are read: write "
                "file:///path (or a plain path)"
            )
        else:
            error = f"image reference scheme {scheme!r} is not supported; use a local path, file:// or s3://"
        return BinaryValue(None, origin=ref, error=error)
    if "\x00" in path:  # no file name holds one; the OS would refuse it with a ValueError
        return BinaryValue(None, origin=ref, error="refused: the path holds a NUL byte; fix the reference")
    try:
        fd = open_under_roots(path, roots)
        try:
            return BinaryValue(read_open_file(fd, access), origin=ref)
        finally:
            os.close(fd)
    except InputError as exc:
        return BinaryValue(None, origin=ref, error=str(exc))
    except (FileNotFoundError, NotADirectoryError):
        return BinaryValue(None, origin=ref, error=f"no such file {path}")
    except OSError as exc:
        return BinaryValue(None, origin=ref, error=f"cannot read file {path}: {exc.strerror}")
