"""A disk that fills up, for this process: no file grows past a limit while :func:`full_disk` holds.

The kernel refuses a write past ``RLIMIT_FSIZE`` with ``EFBIG`` as a full disk refuses one with
``ENOSPC``: the writer gets an I/O error part-way through its file, however it writes. ``SIGXFSZ``,
which would end the process, is ignored meanwhile. Both are put back after.
"""

from __future__ import annotations

import contextlib
import resource
import signal
from collections.abc import Iterator

__all__ = ["full_disk"]


@contextlib.contextmanager
def full_disk(limit_bytes: int) -> Iterator[None]:
    """Writes past ``limit_bytes`` into any file fail with an ``OSError`` until the block ends."""
    before = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, before[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, before)
        signal.signal(signal.SIGXFSZ, handler)
