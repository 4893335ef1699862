"""Who holds a lease, ``host:pid/thread@pidns:start``, and whether that process is gone.

A lease expires a while after its owner stops renewing it (a minute by
default), which is the only sign of a dead owner on another host. On the
owner's own host there is a better one: the process is not there any more.
So an owner names the process exactly: its host, its pid, the worker
thread's number in it, and after ``@`` the process's start (see
:mod:`shardwise.process.procfs`: a pid alone may have been reused), preceded by its
pid namespace on Linux (``gpu1:4242/0@4026531836:98765432``).

:func:`owner_gone` says whether an owner is a process of this host that has
ended, and it says so only when it is sure: the same host name, the same pid
namespace (containers that share a host name but not their pids cannot see
each other's), a start recorded, and no process running now with that pid
and start. In every other case (another host, an owner string written
before starts were recorded, ``host:pid/thread``, a host that cannot read
its processes) the answer is False and the lease is honoured until it
expires, as before. Hosts sharing a ledger must have distinct host names.
"""

from __future__ import annotations

import functools
import os
import re
import socket
from dataclasses import dataclass

from shardwise.process import procfs

__all__ = ["Owner", "owner_gone", "owner_of"]

_FORM = re.compile(r"(?P<host>.+):(?P<pid>\d+)/(?P<thread>\d+)(?:@(?:(?P<ns>[^:@]*):)?(?P<start>[^:@]+))?")


@dataclass(frozen=True)
class Owner:
    """An owner string, parsed: ``start`` and ``namespace`` are None where it did not record them."""

    host: str
    pid: int
    thread: int
    start: str | None = None
    namespace: str | None = None

    def __str__(self) -> str:
        at = "" if self.start is None else f"@{self.namespace + ':' if self.namespace else ''}{self.start}"
        return f"{self.host}:{self.pid}/{self.thread}{at}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        """The owner ``text`` names, or None if it is not an owner string of either form."""
        found = _FORM.fullmatch(text)
        if found is None:
            return None
        pid, thread = int(found["pid"]), int(found["thread"])
        return cls(found["host"], pid, thread, found["start"], found["ns"] or None)


def owner_of(host: str, thread: int) -> str:
    """This process, on ``host``, as the owner string of its worker thread number ``thread``."""
    start, namespace = _me(os.getpid())
    return str(Owner(host, os.getpid(), thread, start, namespace))


@functools.cache
def _me(pid: int) -> tuple[str | None, str | None]:
    """This process's start and pid namespace, read once (``pid`` keys the cache: a forked child reads
    its own)."""
    return procfs.started(pid), procfs.pid_namespace()


def owner_gone(owner: str | None) -> bool:
    """Whether ``owner`` is sure to be a process of this host that has ended (see the module docstring)."""
    found = None if owner is None else Owner.parse(owner)
    if found is None or found.start is None or found.host != socket.gethostname():
        return False
    if found.namespace != procfs.pid_namespace():
        return False
    return procfs.is_running(found.pid, found.start) is False
