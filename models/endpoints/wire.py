"""One request to an endpoint and its answer, through the provider's official async SDK.

:class:`Wire` hides the one difference that matters between the providers:
the shape of a request and of its answer. OpenAI-compatible servers take
``/v1/chat/completions`` (with chat off: ``/v1/completions``) and
``/v1/embeddings``; Anthropic takes ``/v1/messages``. Each call goes through
the SDK's ``with_raw_response`` so the server's rate-limit headers are read,
and with the SDK's own retries off (``max_retries=0``): retries are the run's,
under its deadline (:mod:`models.endpoints.calls`).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from shardwise.errors import OutputError
from shardwise.model.generation import GenerationSettings
from shardwise.models.endpoints.options import Provider

__all__ = [
    "MalformedAnswer",
    "Prompt",
    "Reply",
    "Wire",
    "chat_reply",
    "make_client",
    "messages_reply",
    "row_seed",
]

T = TypeVar("T")
_SHOWN = 200
"""Characters of a malformed answer kept in its dead letter."""


class MalformedAnswer(OutputError):
    """A success status whose body is not the answer the API's shape promises (no choices, no content,
    not JSON): the request ran, and its answer cannot be read, so it is that row's dead letter."""


def _read(what: str, answer: Any, build: Callable[[], T]) -> T:
    """``build()``, reading ``answer``; a :class:`MalformedAnswer` naming ``what`` was expected when the
    body lacks a field ``build`` reads (the SDKs construct their objects without validating them)."""
    try:
        return build()
    except (AttributeError, TypeError, IndexError, KeyError, ValueError) as exc:
        shown = " ".join(repr(answer).split())
        shown = shown if len(shown) <= _SHOWN else shown[: _SHOWN - 3] + "..."
        detail = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        raise MalformedAnswer(f"the answer (status 200) is not {what}: {detail}; it was {shown}") from exc


@dataclass(frozen=True)
class Prompt:
    """One row's request: its rendered user text, and its estimated token cost."""

    body: str
    estimate: int


@dataclass(frozen=True)
class Reply:
    """An endpoint's answer to one row: the text, why it ended, the usage, and the headers it came with."""

    text: str
    finish_reason: str
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    system_fingerprint: str | None
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def tokens(self) -> int | None:
        """Prompt plus completion tokens, as budgets count them; None when the server reported no usage."""
        if self.prompt_tokens is None and self.completion_tokens is None:
            return None
        return (self.prompt_tokens or 0) + (self.completion_tokens or 0)


def make_client(provider: Provider, base: str, key: str, timeout: float) -> Any:
    """The provider's async client for ``base``, its own retries off (the run retries, under its deadline).
    Its SDK was found installed when the model was chosen (:func:`~models.endpoints.endpoint_spec`)."""
    if provider == "openai":
        from openai import AsyncOpenAI

        return AsyncOpenAI(api_key=key, base_url=base, timeout=timeout, max_retries=0)
    from anthropic import AsyncAnthropic

    return AsyncAnthropic(api_key=key, base_url=base, timeout=timeout, max_retries=0)


def row_seed(seed: int, prompt: str) -> int:
    """A row's sampling seed, from the run's seed and the row's prompt: the same row draws the same
    whichever window or worker sends it (as the local generators seed per row)."""
    digest = hashlib.sha256(f"{seed}\0{prompt}".encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


class Wire:
    """Requests of one generator (provider, model, settings) as SDK calls; one instance per event loop."""

    def __init__(self, provider: Provider, model: str, settings: GenerationSettings, chat: bool) -> None:
        self.provider, self.model, self.settings, self.chat = provider, model, settings, chat
        schema = settings.output_schema()
        self._schema = schema.schema if schema is not None and settings.constrained else None

    async def generate(self, client: Any, body: str) -> Reply:
        """Send one row's prompt; the SDK raises for an error status (sorted by :mod:`.failures`)."""
        if self.provider == "anthropic":
            return await self._anthropic(client, body)
        if not self.chat:
            return await self._completion(client, body)
        return await self._chat(client, body)

    def _sampling(self, body: str) -> dict[str, Any]:
        s = self.settings
        if s.greedy:
            return {"temperature": 0.0}
        return {"temperature": s.temperature, "top_p": s.top_p}

    def chat_request(self, body: str) -> dict[str, Any]:
        """The body of one row's ``/v1/chat/completions`` request (also a Batch API line's ``body``)."""
        s = self.settings
        messages = ([{"role": "system", "content": s.system}] if s.system is not None else []) + [
            {"role": "user", "content": body}
        ]
        request: dict[str, Any] = {"model": self.model, "messages": messages}
        request["max_completion_tokens"] = s.max_new_tokens
        request.update(self._sampling(body))
        if not s.greedy:
            request["seed"] = row_seed(s.seed, body)
        if self._schema is not None:
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "row", "schema": self._schema},
            }
        return request

    async def _chat(self, client: Any, body: str) -> Reply:
        raw = await client.chat.completions.with_raw_response.create(**self.chat_request(body))
        return chat_reply(await _parsed(raw), dict(raw.headers))

    async def _completion(self, client: Any, body: str) -> Reply:
        s = self.settings
        prompt = body if s.system is None else f"{s.system}\n\n{body}"
        extra: dict[str, Any] = self._sampling(body)
        if not s.greedy:
            extra["seed"] = row_seed(s.seed, body)
        raw = await client.completions.with_raw_response.create(
            model=self.model, prompt=prompt, max_tokens=s.max_new_tokens, **extra
        )
        answer = await _parsed(raw)

        def reply() -> Reply:
            choice = _first(answer, "choices")
            return Reply(
                text=_text(choice.text),
                finish_reason=str(choice.finish_reason or "stop"),
                system_fingerprint=getattr(answer, "system_fingerprint", None),
                headers=dict(raw.headers),
                **_openai_usage(answer.usage),
            )

        return _read("a completion", answer, reply)

    def messages_request(self, body: str) -> dict[str, Any]:
        """The body of one row's Anthropic ``/v1/messages`` request (also a Message Batch's ``params``).

        Anthropic takes no seed (sampled rows vary).
        """
        s = self.settings
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": s.max_new_tokens,
            "messages": [{"role": "user", "content": body}],
            **self._sampling(body),
        }
        if s.system is not None:
            request["system"] = s.system
        if self._schema is not None:
            request["output_config"] = {"format": {"type": "json_schema", "schema": self._schema}}
        return request

    async def _anthropic(self, client: Any, body: str) -> Reply:
        request = self.messages_request(body)
        # This SDK no longer lists the sampling fields among its arguments: they go in the body as the
        # Messages API reads them.
        sampling = {name: request.pop(name) for name in ("temperature", "top_p") if name in request}
        raw = await client.messages.with_raw_response.create(**request, extra_body=sampling)
        return messages_reply(await _parsed(raw), dict(raw.headers))

    async def embed(
        self, client: Any, texts: Sequence[str], dimensions: int | None
    ) -> tuple[list[list[float]], Any]:
        """Embed ``texts`` in one request; their vectors in order, and the raw response's headers."""
        extra: dict[str, Any] = {} if dimensions is None else {"dimensions": dimensions}
        raw = await client.embeddings.with_raw_response.create(
            model=self.model, input=list(texts), encoding_format="float", **extra
        )
        answer = await _parsed(raw)

        def vectors() -> list[list[float]]:
            return [list(d.embedding) for d in sorted(answer.data, key=lambda d: d.index)]

        return _read("a list of embeddings", answer, vectors), dict(raw.headers)


def messages_reply(answer: Any, headers: Mapping[str, str]) -> Reply:
    """An Anthropic message (the SDK's object) as a :class:`Reply`; :class:`MalformedAnswer` when it is
    none."""
    return _read("a message", answer, lambda: _message(answer, headers))


def _message(answer: Any, headers: Mapping[str, str]) -> Reply:
    if not isinstance(getattr(answer, "content", None), list):
        raise ValueError("it has no content")
    text = "".join(block.text for block in answer.content if getattr(block, "type", None) == "text")
    usage = answer.usage
    cached = _int(getattr(usage, "cache_read_input_tokens", None))
    # Anthropic counts cache reads and writes apart from input_tokens; OpenAI's prompt_tokens holds all.
    parts = [getattr(usage, name, None) for name in ("input_tokens", "cache_creation_input_tokens")]
    prompt = sum(_int(p) or 0 for p in parts) + (cached or 0)
    return Reply(
        text=text,
        finish_reason=_anthropic_finish(answer.stop_reason),
        prompt_tokens=prompt if usage is not None else None,
        completion_tokens=_int(getattr(usage, "output_tokens", None)),
        cached_tokens=cached,
        system_fingerprint=None,
        headers=dict(headers),
    )


def chat_reply(answer: Any, headers: Mapping[str, str]) -> Reply:
    """A chat completion (the SDK's object) as a :class:`Reply`; :class:`MalformedAnswer` when it is
    none."""
    return _read("a chat completion", answer, lambda: _chat(answer, headers))


def _chat(answer: Any, headers: Mapping[str, str]) -> Reply:
    choice = _first(answer, "choices")
    return Reply(
        text=_text(choice.message.content),
        finish_reason=str(choice.finish_reason or "stop"),
        system_fingerprint=getattr(answer, "system_fingerprint", None),
        headers=dict(headers),
        **_openai_usage(answer.usage),
    )


async def _parsed(raw: Any) -> Any:
    """A raw response's parsed body: OpenAI's legacy raw response parses at once, Anthropic's awaits."""
    answer = raw.parse()
    return await answer if inspect.isawaitable(answer) else answer


def _openai_usage(usage: Any) -> dict[str, int | None]:
    if usage is None:
        return {"prompt_tokens": None, "completion_tokens": None, "cached_tokens": None}
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return {
        "prompt_tokens": _int(usage.prompt_tokens),
        "completion_tokens": _int(usage.completion_tokens),
        "cached_tokens": _int(cached),
    }


def _anthropic_finish(reason: str | None) -> str:
    """Anthropic's stop reason in OpenAI's words, as the local generators write them."""
    return {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length"}.get(
        reason or "", reason or "stop"
    )


def _first(answer: Any, name: str) -> Any:
    """The first item of the answer's list ``name``; a ValueError saying it has none."""
    items = getattr(answer, name, None)
    if not isinstance(items, list) or not items:
        raise ValueError(f"it has no {name}")
    return items[0]


def _text(value: Any) -> str:
    """An answer's text: a string, or none (null)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"the text is a {type(value).__name__}, not a string")
    return value


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) else None
