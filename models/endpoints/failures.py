"""What an endpoint's error means for the run: retry it, dead-letter the row, or stop before anything runs.

The SDKs' exceptions are sorted here, at the boundary, into one of three
:class:`Failure` kinds (STYLE habit 3, retry by error type):

* ``transient``: 429 (throttled), 408/409, any 5xx (529 "overloaded"
  included), a dropped or refused connection, a timeout. Retried with backoff
  and the server's ``Retry-After`` under the shard's retry deadline.
* ``row``: another 400-class answer about one request (the prompt is longer
  than the context, the content was filtered, the server refused the schema
  for it): that row's :class:`~shardwise.errors.InputError`, with the
  server's reason.
* ``config``: 401/403 (the key), 404 (no such model or path): every row would
  fail alike, so the run stops with one :class:`~shardwise.errors.ConfigError`
  naming the endpoint, never its key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from shardwise.errors import TransientError
from shardwise.secrets.redact import redact

__all__ = ["EndpointUnreachable", "Failure", "classify"]

_SHOWN = 300
"""Characters of a server's reason kept in a dead letter or a message."""


class EndpointUnreachable(TransientError):
    """Nothing answers at the endpoint's base URL (refused, unresolvable, timed out): like an unreachable
    database, a run stops before it starts (exit 3), and a running shard retries until its deadline."""


@dataclass(frozen=True)
class Failure:
    """What an error means: its kind, a one-line reason, the HTTP status, and the server's Retry-After."""

    kind: Literal["transient", "row", "config"]
    reason: str
    status: int | None = None
    retry_after: float | None = None


def classify(exc: BaseException) -> Failure | None:
    """The :class:`Failure` an SDK's exception means; None for anything that is not an SDK error."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None) or {}
        reason = f"{status} {_server_message(exc)}"
        if status in (408, 409, 429) or status >= 500:
            return Failure("transient", reason, status, _retry_after(headers))
        if status in (401, 403, 404):
            return Failure("config", reason, status)
        return Failure("row", reason, status)
    if _is_connection_error(exc):
        cause = exc.__cause__ or exc.__context__
        detail = f"{type(exc).__name__}: {exc}" + (f" ({type(cause).__name__}: {cause})" if cause else "")
        return Failure("transient", _short(detail))
    return None


def _is_connection_error(exc: BaseException) -> bool:
    for module in ("openai", "anthropic"):
        errors = _sdk_module(module)
        if errors is not None and isinstance(exc, errors.APIConnectionError):
            return True
    return False


def _sdk_module(name: str) -> Any:
    import sys

    return sys.modules.get(name)  # only an SDK already imported can have raised its error


def _server_message(exc: BaseException) -> str:
    """The reason a server gave, from its JSON body (OpenAI's, Anthropic's or vLLM's shape), else the text."""
    body = getattr(exc, "body", None)
    found: Any = None
    if isinstance(body, dict):
        inner = body.get("error", body)
        found = inner.get("message") if isinstance(inner, dict) else inner
        if found is None:
            found = body.get("message") or body.get("detail")
    if not found:
        found = getattr(exc, "message", None) or str(exc)
    if not isinstance(found, str):
        found = json.dumps(found, default=str)
    return _short(found)


def _short(text: str) -> str:
    one = " ".join(text.split())
    return redact(one if len(one) <= _SHOWN else one[: _SHOWN - 3] + "...")


def _retry_after(headers: Any) -> float | None:
    """Seconds the server asks to wait: ``retry-after-ms`` (OpenAI's), else ``retry-after`` in seconds."""
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000)
        seconds = headers.get("retry-after")
        if seconds is not None:
            return max(0.0, float(seconds))
    except (TypeError, ValueError):
        return None  # an HTTP date: rare from these APIs; the policy's backoff applies
    return None
