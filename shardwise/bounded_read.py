"""Read a file a user named (``--json-schema FILE``, ``--prefect-yaml FILE``, a model's JSON files) safely.

A path given on a user's word may name anything: a FIFO whose ``open`` or
``read`` waits for a writer that never comes, ``/dev/zero`` (endless),
``/dev/stdin``, a directory, or a regular file of gigabytes. Read naively,
the first two hang the command for ever (a FIFO blocked the CLI past
SIGTERM) or grow it until the kernel's OOM killer ends it (``--json-schema
/dev/zero`` reached 21.7 GB). :func:`read_regular_file` refuses them all
before reading a byte:

- the file is opened with ``O_NONBLOCK`` (opening a FIFO for reading then
  returns at once instead of waiting for a writer), and ``fstat`` on the
  opened descriptor must say it is a regular file: a FIFO, a device, a
  socket or a directory is refused. The check is on the descriptor, not on
  the path, so a swap between a check and the open cannot get past it;
- at most ``max_bytes`` are read; a longer file is refused, never cut;
- the open and the read run on a helper thread, waited for at most
  ``timeout_s``: a regular file on a hung network or FUSE file system
  cannot hold the command either (the thread is left behind, a daemon).

Every refusal is a :class:`~shardwise.errors.ConfigError` in one line that
names what the file is for, the path, the rule and the fix.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from shardwise.errors import ConfigError

__all__ = ["READ_TIMEOUT_S", "read_regular_file", "size_text"]

READ_TIMEOUT_S = 10.0
"""How long reading one such file may take: a local file of a few megabytes takes milliseconds."""
_CHUNK = 1 << 16


def read_regular_file(
    path: str | os.PathLike[str], *, what: str, max_bytes: int, timeout_s: float = READ_TIMEOUT_S
) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them, read within ``timeout_s``.

    ``what`` names the file's use in messages (``--json-schema``, ``prefect.yaml``). Refused with
    a :class:`ConfigError`: a path that cannot be opened, anything but a regular file, a file over
    ``max_bytes``, and a read that takes longer than ``timeout_s``.
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be a size in bytes, 0 or more; got {max_bytes!r}")
    shown = repr(str(path))
    found: list[bytes | BaseException] = []

    def read() -> None:
        try:
            found.append(_read(Path(path), what, shown, max_bytes))
        except BaseException as exc:  # handed to the caller's thread
            found.append(exc)

    reader = threading.Thread(target=read, name="shardwise-read-file", daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not found:
        raise ConfigError(
            f"{what} {shown}: reading it took longer than {timeout_s:g} s (a file on a hung network file "
            "system?); copy it to a local disk and give that path"
        )
    result = found[0]
    if isinstance(result, BaseException):
        raise result
    return result


def size_text(size: int) -> str:
    """A byte count for messages: ``1 MiB``, ``64 KiB``, ``300 bytes``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size:,} bytes"


def _read(path: Path, what: str, shown: str, max_bytes: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _unreadable(what, shown, exc) from None
    try:
        kind = _kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise ConfigError(
                f"{what} {shown} is {kind}, not a regular file; give the path of a regular file (a FIFO "
                "or a device could block or never end)"
            )
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:
            chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - total))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
        raise ConfigError(
            f"{what} {shown} is larger than {size_text(max_bytes)}, the most read for it; give a smaller file"
        )
    except OSError as exc:
        raise _unreadable(what, shown, exc) from None
    finally:
        os.close(fd)


def _unreadable(what: str, shown: str, exc: OSError) -> ConfigError:
    return ConfigError(f"cannot read {what} {shown} ({exc.strerror}); give the path of a readable file")


def _kind(mode: int) -> str | None:
    """What a file that is not a regular one is, for the message; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "a special file"
