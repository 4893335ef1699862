"""Before a run starts: does the endpoint answer, take the key, and serve the model?

One request, ``GET {base}/models`` through the provider's SDK (both
OpenAI-compatible servers and Anthropic list their models there), with a
short timeout and no retries. Its outcome, in one line that names the
endpoint and never the key:

* nothing answers (refused, unresolvable, timed out):
  :class:`~models.endpoints.failures.EndpointUnreachable` (exit 3, like an
  unreachable database);
* 401/403: a :class:`~shardwise.errors.ConfigError` (the key, exit 2);
* the model is not in the list: a :class:`~shardwise.errors.ConfigError`
  naming up to a few models it does serve. A server that has no list (404)
  is asked for the model itself (``GET {base}/models/{name}``), whose 404 is
  the same refusal.
"""

from __future__ import annotations

import asyncio
from typing import Any

from shardwise.errors import ConfigError
from shardwise.models.endpoints.failures import EndpointUnreachable, classify
from shardwise.models.endpoints.options import EndpointOptions, Provider
from shardwise.models.endpoints.wire import make_client

__all__ = ["PREFLIGHT_TIMEOUT_S", "check_reachable", "served_models"]

PREFLIGHT_TIMEOUT_S = 15.0
_SHOWN_MODELS = 5


def check_reachable(provider: Provider, model: str, options: EndpointOptions, resolve: Any) -> None:
    """Raise, in one line, unless ``model`` is served at the endpoint with the key ``options`` names."""
    where = f"{options.endpoint(provider)} (key {options.key_reference(provider)})"
    key = options.read_key(provider, resolve)
    served = asyncio.run(_listed(provider, options, key, model, where))
    if served is not None and model not in served:
        shown = ", ".join(sorted(served)[:_SHOWN_MODELS]) or "none"
        more = f" and {len(served) - _SHOWN_MODELS} more" if len(served) > _SHOWN_MODELS else ""
        raise ConfigError(
            f"{where} does not serve model {model!r}; it serves: {shown}{more}; give one of them as "
            f"--model {provider}:NAME"
        )


def served_models(provider: Provider, options: EndpointOptions, key: str) -> list[str]:
    """The model names the endpoint lists (for tests and ``shardwise`` help); raises as the check does."""
    found = asyncio.run(_listed(provider, options, key, None, options.endpoint(provider)))
    return sorted(found or [])


async def _listed(
    provider: Provider, options: EndpointOptions, key: str, model: str | None, where: str
) -> set[str] | None:
    """The models listed, or None when the server has no list and knows ``model`` by name."""
    timeout = min(options.timeout, PREFLIGHT_TIMEOUT_S)
    client = make_client(provider, options.base(provider), key, timeout)
    try:
        try:
            return {m.id async for m in client.models.list()}
        except Exception as exc:
            failure = classify(exc)
            if failure is None:
                raise
            if failure.status == 404 and model is not None:
                await _retrieve(client, model, where)
                return None
            raise _refusal(where, failure.kind, failure.status, failure.reason) from None
    finally:
        await client.close()


async def _retrieve(client: Any, model: str, where: str) -> None:
    try:
        await client.models.retrieve(model)
    except Exception as exc:
        failure = classify(exc)
        if failure is None:
            raise
        if failure.status == 404:
            raise ConfigError(
                f"{where} does not serve model {model!r} and lists no models ({failure.reason}); check the "
                "model name, and that --api-base ends where the API's paths begin (OpenAI-compatible: .../v1)"
            ) from None
        raise _refusal(where, failure.kind, failure.status, failure.reason) from None


def _refusal(where: str, kind: str, status: int | None, reason: str) -> Exception:
    if status is None:
        return EndpointUnreachable(
            f"{where} cannot be reached ({reason}); check --api-base, and that the server is up"
        )
    if status in (401, 403):
        return ConfigError(
            f"{where} refused the API key ({reason}); check that --api-key names the right variable or "
            "secret, and that the key is valid there"
        )
    if kind == "transient":
        return EndpointUnreachable(f"{where} is not answering requests now ({reason}); try again later")
    return ConfigError(f"{where} refused the model list ({reason}); check --api-base")
