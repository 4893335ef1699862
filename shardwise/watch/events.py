"""What a watcher hands the orchestrator: one ``shardwise.data.landed`` event per change it saw.

The engine never imports Prefect, so watchers call an injected
:class:`Emitter`. Its keyword names match ``prefect.events.emit_event``
(``event``, ``resource``, ``payload``) and watchers always call it by
keyword, so that function can be passed as it is.

The resource names the *source*, not the database: a user-chosen ``name``
such as ``docs`` becomes ``shardwise.source.docs``, so automations match on a
stable id that holds no host, user or password.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Protocol

from shardwise.errors import ConfigError

__all__ = ["EVENT", "Announcer", "Emitter", "check_name", "source_resource"]

EVENT = "shardwise.data.landed"
"""The event name every watcher emits."""

_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
_log = logging.getLogger(__name__)


class Emitter(Protocol):
    """Publishes one event; ``prefect.events.emit_event`` is one.

    Keyword-only, returning anything: ``emit_event`` takes ``occurred`` third
    and returns the event, and still type-checks as an emitter.
    """

    def __call__(self, *, event: str, resource: dict[str, str], payload: dict[str, Any]) -> object: ...


def check_name(name: str) -> str:
    """``name`` if it is a valid source name: it becomes part of the event's resource id."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"watcher name must be 1-63 characters of a-z, 0-9, '_', '.' or '-', starting with a "
            f"letter or digit (it becomes the resource id shardwise.source.<name>); got {name!r}"
        )
    return name


def source_resource(name: str) -> dict[str, str]:
    """The Prefect resource of a named source."""
    return {"prefect.resource.id": f"shardwise.source.{check_name(name)}", "prefect.resource.name": name}


class Announcer:
    """Emits ``shardwise.data.landed`` for one named source."""

    def __init__(self, name: str, emit: Emitter) -> None:
        self.name = check_name(name)
        self._resource = source_resource(name)
        self._emit = emit

    def __call__(self, payload: dict[str, Any]) -> None:
        _log.info("%s: %s %s", EVENT, self.name, payload)
        self._emit(event=EVENT, resource=dict(self._resource), payload=payload)
