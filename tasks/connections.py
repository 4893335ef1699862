"""Resolve connection names to URLs at run time, so parameters never hold a password.

A parameter may be a URL or path as it is, or a name:

* ``env:NAME``: the URL in environment variable ``NAME`` (set on the worker);
* ``secret:NAME``: the value of the Prefect ``Secret`` block ``NAME``;
* ``held:NAME``: a URL the ``shardwise`` command holds in its memory for this
  run (:func:`hold`), because it was typed with a password on the command line.

The Prefect UI shows only the name; the URL is read where it is used: by the
flow's process to plan, and by each worker process, in its own environment,
to score its shards. It lives in ``tasks/`` because a shard task resolves it
on whichever machine runs it.

A held URL is never put in an environment variable, where every child
process (a process pool's workers, a local Dask or Ray) would inherit it in
``/proc/PID/environ``. It reaches local workers inside each shard task's call
instead (:class:`Held`, pickled over the runner's own channel: the process
pool's pipe, Dask's loopback connection, Ray's object store), and the worker
keeps it in memory. Its password is wiped from the command's own command line
as it is held (:mod:`shardwise.process.cmdline`): a worker is forked from the command
and shows the command's arguments until it execs, and ``multiprocessing``
hands every worker the command's ``sys.argv``. The CLI refuses a password for
workers on other hosts.
Whatever the kind, the value reached through a name is shown nowhere: see
:func:`shardwise.secrets.redact.remember_reference`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from shardwise.errors import ConfigError, UnsetReference
from shardwise.process.cmdline import wipe_password, written_password
from shardwise.secrets.redact import remember_reference, url_password
from shardwise.secrets.url_syntax import refuse_unencoded

__all__ = ["Held", "hold", "resolve"]

_NAMES = ("env:", "secret:", "held:")
_held: dict[str, str] = {}
"""The URLs this process holds, by name (see :func:`hold`)."""


def resolve(value: str) -> str:
    """The URL or path behind ``value``; a plain value comes back unchanged.

    A password in the URL is remembered by :mod:`shardwise.secrets.redact`, so it is
    masked in every message and log line of this process, however it is
    spelled. A value reached through a name is remembered whole: from then on
    every message and log line of this process shows the name (``<env:NAME>``)
    where the value would be, whatever it is. A URL reached through a name whose
    password is not percent-encoded is refused naming the reference
    (:mod:`shardwise.secrets.url_syntax`).
    """
    found = _lookup(value)
    if value.startswith(_NAMES):
        remember_reference(found, value)
        refuse_unencoded(found, value)  # named by its reference; a plain URL is checked where it is read
    url_password(found)
    return found


def _lookup(value: str) -> str:
    if value.startswith("env:"):
        name = value.removeprefix("env:")
        found = os.environ.get(name)
        if not found:
            names = f"environment variable {name!r}, which is not set where the flow or its worker runs"
            raise UnsetReference(
                f"connection {value!r} names {names}; export {name}=<url> there, or pass the URL itself",
                reference=value,
                names=names,
            )
        return found
    if value.startswith("secret:"):
        name = value.removeprefix("secret:")
        from prefect.blocks.system import Secret

        try:
            secret = Secret.load(name)
        except ValueError as exc:
            names = f"Prefect Secret block {name!r}, which does not exist"
            raise UnsetReference(
                f"connection {value!r} names {names}; create it with: prefect block create secret "
                f"(name {name!r}), or pass the URL itself",
                reference=value,
                names=names,
            ) from exc
        return str(secret.get())
    if value.startswith("held:"):
        name = value.removeprefix("held:")
        if name not in _held:
            raise ConfigError(
                f"connection {value!r} was held in memory by the shardwise command that started the run, and "
                "this process did not get it (a resume from another process, or a deployment); pass the URL "
                "again on the command line, or name it as env:NAME or secret:NAME"
            )
        return _held[name]
    return value


def hold(name: str, url: str) -> str:
    """Keep ``url`` in this process's memory under ``name``; the connection to pass instead: ``held:NAME``.

    Its password is wiped from this process's command line at once
    (:func:`~shardwise.process.cmdline.wipe_password`), so neither ``ps`` nor a child
    forked from now on (a pool's worker between its fork and its exec) shows it.
    """
    _held[name] = url
    url_password(url)
    wipe_password(written_password(url))
    return f"held:{name}"


@dataclass(frozen=True, repr=False)
class Held:
    """The held URLs a run names, on their way to its workers inside each shard task's call (see above).

    Its ``repr`` names the connections only, so a log line or an error that
    shows a task's arguments shows no URL.
    """

    connections: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, *connections: str) -> Held:
        """What this process holds of ``connections`` (the names that are ``held:NAME``)."""
        names = sorted({c.removeprefix("held:") for c in connections if c.startswith("held:")} & set(_held))
        return cls(tuple((name, _held[name]) for name in names))

    def __repr__(self) -> str:
        return f"Held({', '.join(f'held:{name}' for name, _ in self.connections)})"

    def install(self) -> None:
        """Hold these URLs in this process too (a worker), so :func:`resolve` finds them."""
        for name, url in self.connections:
            hold(name, url)
