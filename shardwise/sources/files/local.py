"""Objects on a local disk: a folder (read recursively), a glob, or one file.

A local file's ETag is ``"{size}-{mtime_ns}"``: a rewrite changes it without
the file being read. Opening checks the ETag on the open handle (``fstat``),
so a file renamed over the planned one is caught, and once a handle is open it
keeps reading the inode it checked.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from shardwise.errors import SourceError
from shardwise.sources.files.objects import Listing, ObjectInfo, changed_since_listed, is_read

__all__ = ["LocalStore", "local_etag"]

_GLOB_MAGIC = frozenset("*?[")


def local_etag(stat: os.stat_result) -> str:
    """The change tag of a local file: its size and modification time in nanoseconds."""
    return f"{stat.st_size}-{stat.st_mtime_ns}"


class LocalStore:
    """Lists and opens files under a local folder, glob or file path.

    A folder is walked recursively and a glob may use ``**``; in both, only
    names ending in one of ``suffixes`` are read (every name without them) and
    the others are counted as ignored.
    A single file named explicitly is read whatever its suffix.
    """

    def __init__(self, location: str, suffixes: tuple[str, ...] | None = None) -> None:
        self.identity = os.path.abspath(location)
        self._suffixes = suffixes  # which listed names are read: the source kind's files
        self._is_glob = any(c in location for c in _GLOB_MAGIC)

    def listing(self) -> Listing:
        explicit = False
        if self._is_glob:
            paths = [p for p in glob.glob(self.identity, recursive=True) if os.path.isfile(p)]
        elif os.path.isdir(self.identity):
            paths = _walk(self.identity)
        elif os.path.isfile(self.identity):
            paths, explicit = [self.identity], True
        else:
            raise self._missing()
        keep = sorted(p for p in paths if explicit or is_read(p, self._suffixes))
        return Listing(tuple(_describe(p) for p in keep), ignored=len(paths) - len(keep))

    def probe(self) -> None:
        if not (glob.glob(self.identity, recursive=True) if self._is_glob else os.path.exists(self.identity)):
            raise self._missing()

    def _missing(self) -> SourceError:
        return SourceError(
            f"Parquet location {self.identity!r} is not a file, folder or glob that exists; "
            "check the path (a local path is read on the machine that runs the task)"
        )

    @contextmanager
    def open(self, obj: ObjectInfo) -> Iterator[IO[bytes]]:
        try:
            handle = open(obj.key, "rb")  # noqa: SIM115 - closed by the with-block below
        except FileNotFoundError as exc:
            raise changed_since_listed(obj, "the file no longer exists") from exc
        except OSError as exc:
            raise SourceError(
                f"cannot open file {obj.key!r}: {exc.strerror}; check that it is readable"
            ) from exc
        with handle:
            now = local_etag(os.fstat(handle.fileno()))
            if now != obj.etag:
                raise changed_since_listed(obj, f"now etag {now!r}")
            yield handle

    def close(self) -> None:
        """Nothing to release: every open handle is closed by its own ``with`` block."""


def _walk(folder: str) -> list[str]:
    return [os.path.join(root, name) for root, _dirs, names in os.walk(folder) for name in names]


def _describe(path: str) -> ObjectInfo:
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise SourceError(
            f"cannot stat file {path!r} while listing: {exc.strerror}; "
            "the folder is changing or unreadable, check it and start a new run"
        ) from exc
    return ObjectInfo(path, local_etag(stat), stat.st_size)
