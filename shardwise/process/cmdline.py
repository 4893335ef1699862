"""Wipe a password typed on the command line out of this process's own command line.

``shardwise run --source postgresql+psycopg://app:PW@db/prod`` holds the
password in its argv, which the kernel shows to every user of the host
(``ps``, ``/proc/PID/cmdline``) for as long as the process lives, and which
every child the process forks shows too until it execs: a process pool's or a
local Dask cluster's worker is forked and then execs Python, and a process
read in between (``/proc/PID/cmdline``) holds the parent's arguments. Python
keeps its own copies as well (``sys.argv``, ``sys.orig_argv``), which
``multiprocessing`` sends to every worker it spawns and Ray records as a
driver's entry point.

:func:`wipe_password` overwrites the password, where it stands between ``:``
and ``@`` in an argument, with as many ``*``: in ``sys.argv`` and
``sys.orig_argv``, and in the memory the kernel reads ``/proc/self/cmdline``
from (the bytes between ``arg_start`` and ``arg_end`` of
``/proc/self/stat``, the argv strings the process was started with; this is
what ``setproctitle`` and ``mysql -p`` do). The arguments keep their length
and order, so nothing that reads them later changes shape. Elsewhere than
Linux only Python's copies are wiped.

The ``shardwise`` command wipes every URL password it was given
(:func:`wipe_typed_passwords`) first thing, before it starts any child
process (its temporary Prefect server starts before the options are even
parsed), and keeps the arguments it parses in a copy of its own.

What it cannot do: the password is on the command line from the ``exec``
until then (Python's start and a few imports, a window in which ``ps`` run
at that instant sees it), and in the shell's history. Where that matters,
pass ``env:NAME`` or ``secret:NAME`` instead (see docs/how-to/security.md).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["wipe_password", "wipe_typed_passwords", "written_password"]

_STAT = Path("/proc/self/stat")
_ARG_START, _ARG_END = 48, 49
"""``arg_start`` and ``arg_end``: fields 48 and 49 of ``/proc/PID/stat`` (``man 5 proc``, counted from 1)."""


def wipe_password(password: str) -> bool:
    """Overwrite ``password`` wherever it stands as ``:PASSWORD@`` in this process's arguments.

    ``password`` is the password as written in the URL (percent-encoded, as
    :mod:`shardwise.secrets.url_syntax` requires). Returns whether the kernel's copy
    was found and wiped (False elsewhere than Linux, or where it was not there).
    """
    if not password:
        return False
    written, masked = f":{password}@", ":" + "*" * len(password) + "@"
    sys.argv[:] = [arg.replace(written, masked) for arg in sys.argv]
    if hasattr(sys, "orig_argv"):
        sys.orig_argv[:] = [arg.replace(written, masked) for arg in sys.orig_argv]
    return _wipe_kernel_copy(written.encode(), masked.encode())


def wipe_typed_passwords(args: Sequence[str]) -> None:
    """Wipe the password of every URL among ``args`` (``--source URL`` or ``--source=URL``) from this
    process's arguments; ``args`` itself, the caller's copy, keeps them. The command line calls this
    first, before it starts any child process."""
    for arg in args:
        value = arg.partition("=")[2] if arg.startswith("--") and "=" in arg else arg
        if "://" in value:
            wipe_password(written_password(value))


def written_password(url: str) -> str:
    """The password of ``url`` as written there (percent-encoded), read by the URL parser; "" if none."""
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        return ""
    userinfo = netloc.rpartition("@")[0]
    return userinfo.partition(":")[2]


def _wipe_kernel_copy(written: bytes, masked: bytes) -> bool:
    span = _argv_span()
    if span is None:
        return False
    start, end = span
    arguments = ctypes.string_at(start, end - start)
    found = False
    at = arguments.find(written)
    while at >= 0:
        ctypes.memmove(start + at, masked, len(masked))  # the same length: nothing moves
        found = True
        at = arguments.find(written, at + len(written))
    return found


def _argv_span() -> tuple[int, int] | None:
    """Where the kernel keeps this process's argv strings, or None where it cannot be read."""
    try:
        stat = _STAT.read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # field 3 on: the name in parentheses may hold spaces
    try:
        start, end = int(fields[_ARG_START - 3]), int(fields[_ARG_END - 3])
    except (IndexError, ValueError):
        return None
    return (start, end) if 0 < start < end else None
