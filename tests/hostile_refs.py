"""Image references a row's writer could use to make a worker read what it must not, built in a temp dir.

:func:`hostile_refs` lays out a declared root holding one picture, a picture
outside it, and references that each try a way out: a system file, the
kernel's files, ``..``, symlinks (absolute and relative) pointing out of the
root, a FIFO (which blocked a fetch thread for ever), and an S3 object in a
bucket nobody allowed. :func:`fifo_unblocked` makes sure a test that fails
because a reader waits on the FIFO still ends, and :func:`read_all` reads a
source's image rows on a thread it gives up on.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardwise.model.binary_value import BinaryValue
from shardwise.sources.base import Source

__all__ = [
    "FOREIGN_BUCKET",
    "PICTURE",
    "Hostile",
    "fifo_unblocked",
    "hostile_refs",
    "no_reader_left",
    "read_all",
]

PICTURE = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
"""Bytes only: the source reads and hands them on, it never decodes."""


def read_all(source: Source, timeout_s: float = 30.0) -> dict[Any, BinaryValue]:
    """Every row's value, read on a daemon thread: a read that blocks fails the test instead of hanging it."""
    values: dict[Any, BinaryValue] = {}
    failed: list[BaseException] = []

    def read() -> None:
        try:
            plan = source.plan(shards=2)
            for shard in plan.shards:
                with source.open_reader(plan, shard) as reader:  # the rows as a worker scores them
                    values.update((row.key, row.value) for row in reader.rows)
        except BaseException as exc:
            failed.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    assert not reader.is_alive(), f"reading the image references blocked for {timeout_s} s"
    if failed:
        raise failed[0]
    return values


FOREIGN_BUCKET = "someone-elses-bucket"
"""A bucket no test allows: a reference into it is refused before any S3 client exists."""


@dataclass(frozen=True)
class Hostile:
    root: Path
    """The folder a test declares as its image root."""
    good: dict[int, str]
    """Keys and references that must be read: a picture under the root, by path and by file:// URI."""
    refused: dict[int, str]
    """Keys and references that must be refused, nothing of them read."""
    local_refused: frozenset[int]
    """The refused keys whose references are local paths (the others name S3)."""
    outside: Path
    """The picture outside the root that the ``..`` and symlink references reach."""
    fifo: Path


def hostile_refs(tmp: Path, picture: bytes) -> Hostile:
    """The layout and references described in the module docstring; ``picture`` is a real image's bytes."""
    root, outside = tmp / "root", tmp / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "good.png").write_bytes(picture)
    (outside / "secret.png").write_bytes(picture)  # a picture: read, it would be scored and stored
    (root / "link.png").symlink_to(outside / "secret.png")
    (root / "sub" / "up.png").symlink_to(Path("..") / ".." / "outside" / "secret.png")
    fifo = root / "pipe.png"
    os.mkfifo(fifo)
    local = {
        2: "/etc/shadow",
        3: "/proc/self/environ",
        4: f"{root}/../outside/secret.png",
        5: str(root / "link.png"),
        6: str(fifo),
        7: "file:///proc/self/environ",
        8: str(root / "sub" / "up.png"),
        9: "../../../../../../../../etc/hostname",  # relative to the worker's directory
    }
    refused = {**local, 10: f"s3://{FOREIGN_BUCKET}/secret.png"}
    good = {1: str(root / "good.png"), 11: (root / "good.png").as_uri()}
    return Hostile(root, good, refused, frozenset(local), outside / "secret.png", fifo)


def no_reader_left(fifo: Path) -> bool:
    """Whether no one holds ``fifo`` open for reading, or waits to: a writer's non-blocking open fails."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return True
        raise
    os.close(fd)
    return False


@contextmanager
def fifo_unblocked(fifo: Path) -> Iterator[None]:
    """Afterwards, open and close ``fifo`` for writing: a reader stuck on it gets end-of-file and ends."""
    try:
        yield
    finally:
        no_reader_left(fifo)  # a writer's open and close, when someone reads or waits to
