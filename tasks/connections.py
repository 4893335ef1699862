"""Resolve connection names to URLs at run time, so parameters never hold a password.

A parameter may be a URL or path as it is, or a name:

* ``env:NAME``: the URL in environment variable ``NAME`` (set on the worker);
* ``secret:NAME``: the value of the Prefect ``Secret`` block ``NAME``.

The Prefect UI shows only the name; the URL is read where it is used: by the
flow's process to plan, and by each worker process, in its own environment,
to score its shards. It lives in ``tasks/`` because a shard task resolves it
on whichever machine runs it.
"""

from __future__ import annotations

import os

from shardwise.errors import ConfigError
from shardwise.redact import url_password

__all__ = ["resolve"]


def resolve(value: str) -> str:
    """The URL or path behind ``value``; a plain value comes back unchanged.

    A password in the URL is remembered by :mod:`shardwise.redact`, so it is
    masked in every message and log line of this process, however it is spelled.
    """
    found = _lookup(value)
    url_password(found)
    return found


def _lookup(value: str) -> str:
    if value.startswith("env:"):
        name = value.removeprefix("env:")
        found = os.environ.get(name)
        if not found:
            raise ConfigError(
                f"connection {value!r} names environment variable {name!r}, which is not set where "
                f"the flow or its worker runs; export {name}=<url> there, or pass the URL itself"
            )
        return found
    if value.startswith("secret:"):
        name = value.removeprefix("secret:")
        from prefect.blocks.system import Secret

        try:
            secret = Secret.load(name)
        except ValueError as exc:
            raise ConfigError(
                f"connection {value!r} names Prefect Secret block {name!r}, which does not exist; "
                f"create it with: prefect block create secret (name {name!r}), or pass the URL itself"
            ) from exc
        return str(secret.get())
    return value
