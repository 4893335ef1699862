"""This host's processes: which one a pid is (across pid reuse), and which processes descend from one.

A pid alone does not name a process: once it ends, the kernel may give its
pid to a new one. A pid and the process's **start** do, and both the lease
owners (:mod:`shardwise.results.owners`) and the reaper
(:mod:`shardwise.process.reaper`) compare them. :func:`started` gives the start as an
opaque token, compared only for equality and only on the host that made it:

- on Linux, the clock ticks from boot to the process's start (field 22 of
  ``/proc/PID/stat``), which never changes for a process, whatever the wall
  clock does;
- elsewhere, psutil's creation time when psutil is importable (Ray brings it);
- else None: unknown, and callers then assume nothing.

This module imports nothing but the standard library (and psutil, if there):
the reaper loads it by path, without the ``shardwise`` package, whose import
loads torch.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["descendants", "is_running", "pid_namespace", "started"]

_PROC = Path("/proc")


def started(pid: int) -> str | None:
    """Process ``pid``'s start token (see the module docstring), or None if it is gone or unknown."""
    try:
        found = _process(pid)
    except _Unknown:
        return None
    return None if found is None else found[0]


def is_running(pid: int, start: str) -> bool | None:
    """Whether the process that had start token ``start`` still runs as ``pid``; None when this host
    cannot tell (no ``/proc`` and no psutil). A zombie, which has ended but not been waited for,
    does not run."""
    try:
        found = _process(pid)
    except _Unknown:
        return None
    return found == (start, False)


class _Unknown(Exception):
    """This host cannot tell: it has no ``/proc``, and psutil is missing or failed."""


def _process(pid: int) -> tuple[str, bool] | None:
    """Process ``pid``'s start token and whether it has ended (a zombie, not waited for yet); None when
    there is no such process; :class:`_Unknown` when this host cannot tell."""
    fields = _stat(pid)
    if fields is not None:
        return fields[19], fields[0] in ("Z", "X")
    if _PROC.is_dir():
        return None  # Linux, and no such process
    try:
        import psutil
    except ImportError:
        raise _Unknown from None
    try:
        process = psutil.Process(pid)
        return repr(process.create_time()), process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return None
    except psutil.Error:
        raise _Unknown from None


def pid_namespace() -> str | None:
    """The id of this process's pid namespace (a container has its own), or None off Linux.

    Two processes that see the same host name but sit in different pid
    namespaces (containers on one machine, sharing its name) cannot see each
    other's pids: a pid missing here says nothing about the other namespace.
    """
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return None
    return link.partition("[")[2].rstrip("]") or None


def descendants(root: int) -> dict[int, str]:
    """Every process below ``root`` now (children, theirs, ...), each pid with its start token."""
    if not _PROC.is_dir():
        return _psutil_tree(root)
    children: dict[int, list[int]] = {}
    starts: dict[int, str] = {}
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            starts[int(entry.name)] = fields[19]
    below: dict[int, str] = {}
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid not in below and pid in starts:
            below[pid] = starts[pid]
            todo.extend(children.get(pid, ()))
    return below


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first, so ppid is [1]); None if
    there is no such file. The name is skipped by its last ``)``: it may hold spaces and parentheses."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def _psutil_tree(root: int) -> dict[int, str]:
    try:
        import psutil
    except ImportError:
        return {}
    try:
        found = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return {}
    below = {}
    for child in found:
        try:
            below[child.pid] = repr(child.create_time())
        except psutil.Error:
            continue
    return below
