"""The objects a file source is made of (Parquet, CSV, images...), and where they are stored (disk or S3).

A store lists the objects under a location, recording for each a key, an ETag
and a size, and opens one object for reading as a seekable binary file. Opening
checks the object against the ETag it was listed with, so a plan never reads
an object that was replaced after it was made.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import IO, Protocol

from shardwise.errors import SourceChangedError

__all__ = [
    "Listing",
    "ObjectInfo",
    "ObjectStore",
    "changed_since_listed",
    "is_read",
    "listing_digest",
    "relative_key",
]


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One object of a dataset as listed.

    ``key`` is ``s3://bucket/key`` on S3 and the absolute path on a local disk.
    ``etag`` is the S3 ETag without quotes; for a local file it is
    ``"{size}-{mtime_ns}"``, which detects a rewrite cheaply, without reading
    the file.
    """

    key: str
    etag: str
    size: int


@dataclass(frozen=True, slots=True)
class Listing:
    """The objects a source reads under a location, sorted by key, and how many other objects were ignored."""

    objects: tuple[ObjectInfo, ...]
    ignored: int


class ObjectStore(Protocol):
    """Lists and opens the objects under one location. Safe to share between threads."""

    identity: str
    """The normalised location: an absolute path or glob, or ``s3://bucket/prefix``."""

    def listing(self) -> Listing:
        """List the objects read (by their names' suffixes); a :class:`SourceError` when the location
        cannot be listed."""
        ...

    def probe(self) -> None:
        """Check cheaply (a stat, or one listing request) that the location exists and can be listed."""
        ...

    def open(self, obj: ObjectInfo) -> AbstractContextManager[IO[bytes]]:
        """Open ``obj`` as a seekable binary file; :class:`SourceChangedError` if it changed since listed."""
        ...

    def close(self) -> None:
        """Release the client this store created, if any."""
        ...


def is_read(name: str, suffixes: tuple[str, ...] | None) -> bool:
    """Whether a listed name is read: one ending in one of ``suffixes`` (any case); any name without them.

    Listings of folders, globs and prefixes often hold markers (``_SUCCESS``),
    checksums (``.crc``) and metadata files; skipping them by name needs no I/O.
    """
    return suffixes is None or name.lower().endswith(suffixes)


def relative_key(location: str, key: str) -> str:
    """``key`` as a path inside the dataset at ``location`` (a folder, glob, prefix or object), for messages.

    The location itself is left out: the user gave it, possibly as a name
    (``env:NAME``) whose value is not to be shown. An object that is the
    location, or that a glob matched in its last part, is named by its file name.
    """
    magic = [location.index(c) for c in "*?[" if c in location]
    base = (location[: min(magic)] if magic else location).rstrip("/")
    if key != location and key.startswith(base + "/"):
        return key[len(base) + 1 :]
    return key.rsplit("/", 1)[-1]


def listing_digest(objects: Iterable[ObjectInfo]) -> str:
    """SHA-256 hex over the sorted (key, etag, size) triples: the snapshot a plan was made from."""
    triples = sorted((o.key, o.etag, o.size) for o in objects)
    return hashlib.sha256(json.dumps(triples, separators=(",", ":")).encode()).hexdigest()


def changed_since_listed(obj: ObjectInfo, detail: str) -> SourceChangedError:
    """The error for an object replaced or deleted after it was listed (and so after the plan); it names
    the object by its path or URL alone, which says what it is (Parquet, CSV, an image)."""
    return SourceChangedError(
        f"{obj.key!r} changed since it was listed for the run's plan (listed with etag {obj.etag!r}, size "
        f"{obj.size}; {detail}); the run reads what its plan listed, so neither a retry nor --resume can "
        "finish it: start a new run, which plans the source as it is now"
    )
