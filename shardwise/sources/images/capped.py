"""One image's bytes, read in pieces that stop at the byte cap and the time bound of its :class:`ImageAccess`.

A file or object larger than ``max_bytes`` is refused before its first byte
when its size is known (a file's ``fstat``, S3's ``Content-Length``), and
otherwise after ``max_bytes + 1`` bytes, never more: ``/dev/zero`` behind a
reference, or a file still growing, costs at most the cap. A read that goes
on past ``read_timeout_s`` (a store that drips) is refused between two pieces.
Either refusal is an :class:`~shardwise.errors.InputError` naming the limit
and the fix; the caller makes it the row's error, a dead letter.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from shardwise.errors import InputError
from shardwise.sources.images.access import ImageAccess

__all__ = ["read_capped", "too_large"]

_PIECE = 2**20


def too_large(access: ImageAccess, size: int | None = None) -> InputError:
    """The refusal of an image over the byte cap (its size, when known)."""
    what = f"{size:,} bytes" if size is not None else "larger than that"
    return InputError(
        f"refused: {what}, over the image read cap of {access.max_bytes:,} bytes, so it was not read; "
        "shrink the picture, or raise --image-max-bytes"
    )


def read_capped(read: Callable[[int], bytes], access: ImageAccess, size: int | None = None) -> bytes:
    """Everything ``read(n)`` gives until it gives ``b""``, within ``access``'s byte cap and time bound.

    ``size`` is the length announced before reading (None: unknown); over the cap, nothing is read.
    """
    if size is not None and size > access.max_bytes:
        raise too_large(access, size)
    deadline = time.monotonic() + access.read_timeout_s
    pieces: list[bytes] = []
    total = 0
    while True:
        piece = read(min(_PIECE, access.max_bytes + 1 - total))
        if not piece:
            return b"".join(pieces)
        total += len(piece)
        if total > access.max_bytes:
            raise too_large(access)
        pieces.append(piece)
        if time.monotonic() > deadline:
            raise InputError(
                f"refused: reading it took over {access.read_timeout_s:g} s, the time bound of one image "
                "read; check the storage it is on, then redrive the run"
            )
