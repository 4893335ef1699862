"""Open a local image file only under a declared root, only if it is a regular file, and read it capped.

The path is resolved first (``os.path.realpath``: every symlink and ``..``),
and must then lie in one of the roots (themselves resolved) and outside
:data:`~shardwise.sources.images.access.SYSTEM_FOLDERS`. A path outside is
refused without being opened, with the same words whether or not it exists,
so a refusal tells nothing about the files outside the roots.

The file is then opened by walking down from the root, one component at a
time, each opened relative to the folder before it with ``O_NOFOLLOW``: a
symlink put into the path after it was resolved (to swap ``/etc/shadow`` in
between the check and the open) stops the walk instead of being followed.
The last component must be a regular file (``lstat`` before the open, so a
FIFO, socket or device is never opened), and is opened ``O_NONBLOCK``, so a
FIFO swapped in after that check cannot block the thread either; ``fstat`` on
the open descriptor checks again that it is a regular file, and is what the
read trusts.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from shardwise.errors import InputError
from shardwise.sources.images.access import SYSTEM_FOLDERS, ImageAccess, in_system_folder
from shardwise.sources.images.capped import read_capped

__all__ = ["open_under_roots", "read_open_file", "resolved_roots"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISLNK, "a symlink"),
)


def resolved_roots(roots: Sequence[str]) -> tuple[str, ...]:
    """The roots as this host resolves them (symlinks followed), each once, in order."""
    return tuple(dict.fromkeys(os.path.realpath(root) for root in roots))


def open_under_roots(path: str, roots: Sequence[str]) -> int:
    """A read-only descriptor of the regular file ``path``, if it lies under one of the resolved ``roots``.

    Raises :class:`InputError` saying why it was refused (outside the roots,
    in a system folder, not a regular file, changed while opened), or
    ``OSError`` as the open met it (``FileNotFoundError``, ``PermissionError``).
    """
    real = os.path.realpath(path)
    root = next((r for r in roots if os.path.commonpath((r, real)) == r), None)
    if root is None:
        raise InputError(_outside(roots))
    if in_system_folder(real):
        raise InputError(
            f"refused: the path is in a system folder ({', '.join(SYSTEM_FOLDERS)}), whose files are the "
            "kernel's and never read; store the picture's bytes, or a path under an image root"
        )
    parts = [] if real == root else os.path.relpath(real, root).split(os.sep)
    if not parts:
        raise InputError("refused: not a regular file (a folder); only regular files are read")
    try:
        folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(
            f"refused: image root {root} cannot be opened on this host ({exc.strerror}); check the root"
        ) from None
    try:
        with _no_symlink_met():
            for part in parts[:-1]:
                inner = os.open(part, _DIR_FLAGS, dir_fd=folder)
                os.close(folder)
                folder = inner
            _regular(os.stat(parts[-1], dir_fd=folder, follow_symlinks=False).st_mode)
            return os.open(parts[-1], _FILE_FLAGS, dir_fd=folder)
    finally:
        os.close(folder)


def read_open_file(fd: int, access: ImageAccess) -> bytes:
    """The bytes of the open regular file ``fd``, within ``access``'s byte cap and time bound."""
    info = os.fstat(fd)
    _regular(info.st_mode)  # what was opened, not what the path named a moment before
    return read_capped(lambda n: os.read(fd, n), access, info.st_size)


@contextmanager
def _no_symlink_met() -> Iterator[None]:
    """A symlink met on the walk, where the resolved path had none, is a refusal (see the module doc)."""
    try:
        yield
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise InputError(
            "refused: the path changed while it was opened (a symlink appeared in it), so nothing was "
            "read; fix the folder, then redrive the run"
        ) from None


def _regular(mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        raise InputError(f"refused: not a regular file ({kind}); only regular files are read")


def _outside(roots: Sequence[str]) -> str:
    if not roots:
        return (
            "refused: no image root is declared, so no local path is read; declare the folder that holds "
            "the pictures with --image-root DIR (or SHARDWISE_IMAGE_ROOTS), or store the pictures' bytes"
        )
    return (
        f"refused: the path is outside the image roots ({', '.join(roots)}) once symlinks and '..' are "
        "resolved, so nothing was read; declare its folder with --image-root DIR (or "
        "SHARDWISE_IMAGE_ROOTS), or fix the reference"
    )
