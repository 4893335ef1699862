"""Where an endpoint is and how hard it may be driven: :class:`EndpointOptions`, one per run.

Every field is a flag of ``shardwise run`` once the CLI wires them
(``--api-base``, ``--api-key``, ``--max-concurrency``, ``--requests-per-minute``,
``--tokens-per-minute``, ``--endpoint-timeout``, ``--batch-api``,
``--batch-poll-interval``, ``--tokenizer``). The key is never a value here:
``api_key`` names where it is (``env:NAME`` or ``secret:NAME``), and the run's
resolver reads it where the requests are made, so no parameter, plan, log line
or error ever holds it (STYLE habit 19).

None of these options changes what a row's output is, so only the endpoint's
address (:meth:`EndpointOptions.endpoint`) goes into the model version, never
the limits or the key. ``batch_api`` is not part of it either: a provider's
Batch API runs the same model with the same request body (the same prompt,
settings and seed) as the online API, only later and at half the price, so a
row scored either way is the same model's answer, and a run may resume with
or without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, cast
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from shardwise.errors import ConfigError, UnsetReference
from shardwise.flags import Flag

__all__ = ["DEFAULT_BASES", "DEFAULT_KEYS", "PROVIDERS", "EndpointOptions", "Provider", "endpoint_address"]

Provider = Literal["openai", "anthropic"]
PROVIDERS: tuple[Provider, ...] = ("openai", "anthropic")
DEFAULT_BASES: dict[Provider, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}
"""Each provider's own API, as its SDK's default base URL."""
DEFAULT_KEYS: dict[Provider, str] = {"openai": "env:OPENAI_API_KEY", "anthropic": "env:ANTHROPIC_API_KEY"}
"""The environment variable each SDK reads its key from when given none, as a connection name."""


class EndpointOptions(BaseModel):
    """An endpoint's address, key reference, limits and timeout; frozen, plain data (it pickles)."""

    # A value typed where a reference belongs may be a key: pydantic's messages never quote inputs here.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> EndpointOptions:
        """Options from run parameters; a refused one is a ConfigError naming the option, never its value."""
        try:
            return cls(**values)
        except ValidationError as exc:
            error = exc.errors()[0]
            option = str(error["loc"][0]) if error["loc"] else "?"
            message = str(error["msg"]).removeprefix("Value error, ")
            raise ConfigError(f"endpoint option {option} is not valid: {message}") from None

    api_base: str | None = Field(
        None,
        description="The endpoint's base URL, e.g. http://127.0.0.1:8000/v1 for a local vllm serve "
        "(default: the provider's own API). It holds no credentials: give the key as --api-key.",
    )
    api_key: str | None = Field(
        None,
        description="Where the API key is: env:NAME (an environment variable where the run's workers run) "
        "or secret:NAME (a Prefect Secret block); default env:OPENAI_API_KEY or env:ANTHROPIC_API_KEY. "
        "The key itself is never given, shown or stored.",
    )
    max_concurrency: int = Field(
        16, ge=1, le=1024, description="Requests in flight at once from one worker process."
    )
    requests_per_minute: int | None = Field(
        None, ge=1, description="Requests per minute, shared by the workers of one host (default: no cap)."
    )
    tokens_per_minute: int | None = Field(
        None,
        ge=1,
        description="Tokens per minute (prompt plus completion), shared by the workers of one host "
        "(default: no cap); estimated before each request and corrected from the usage it reports.",
    )
    timeout: Annotated[float, Flag("--endpoint-timeout")] = Field(
        120.0,
        gt=0,
        le=3600,
        description="Seconds one request may take before it is tried again.",
    )

    batch_api: bool = Field(
        False,
        description="Send each window of rows as provider batches (OpenAI's /v1/files and /v1/batches, "
        "Anthropic's Message Batches: half price, done within 24 hours) instead of one request a row. "
        "Each batch id is recorded in the ledger before the run waits on it, so a resumed run collects "
        "it instead of paying again. Chat models only.",
    )
    batch_poll_s: Annotated[float, Flag("--batch-poll-interval")] = Field(
        30.0,
        gt=0,
        le=3600,
        description="With --batch-api: seconds between two looks at a running batch.",
    )
    tokenizer: str | None = Field(
        None,
        description="A local folder holding the served model's tokenizer (tokenizer.json, its chat "
        "template): shardwise plan counts the prompt tokens with it instead of estimating them at 4 "
        "characters a token. Runs do not use it: the server counts their tokens.",
    )

    @field_validator("api_key")
    @classmethod
    def _key_is_a_reference(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("env:", "secret:")):
            # Never echo the value: it may be the key itself, typed where a name belongs.
            raise ConfigError(
                "api_key must name where the key is, env:NAME or secret:NAME; the value given is not "
                "shown (it may be a key): export it as an environment variable and give env:NAME"
            )
        if value is not None and not value.split(":", 1)[1]:
            raise ConfigError(f"api_key {value!r} names nothing; give env:NAME or secret:NAME")
        return value

    @field_validator("api_base")
    @classmethod
    def _base_is_plain(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError:
            raise ConfigError(
                "api_base is not a URL; give http(s)://HOST[:PORT]/PATH, e.g. http://127.0.0.1:8000/v1"
            ) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"api_base {endpoint_address(value)!r} is not an http(s) URL with a host; give "
                "http(s)://HOST[:PORT]/PATH, e.g. http://127.0.0.1:8000/v1"
            )
        if parts.username is not None or parts.password is not None or parts.query:
            raise ConfigError(
                f"api_base {endpoint_address(value)!r} carries credentials or a query; give the bare URL, "
                "and the key as --api-key env:NAME"
            )
        return value.rstrip("/")

    def base(self, provider: Provider) -> str:
        """The base URL requests go to: the one given, or the provider's own."""
        return self.api_base or DEFAULT_BASES[provider]

    def key_reference(self, provider: Provider) -> str:
        """Where the key is: the one given, or the SDK's usual environment variable."""
        return self.api_key or DEFAULT_KEYS[provider]

    def read_key(self, provider: Provider, resolve: Callable[[str], str]) -> str:
        """The key itself, read through the run's resolver; a reference that names nothing set is refused
        with a key's fix (a key is never a URL, and is never given inline)."""
        reference = self.key_reference(provider)
        try:
            return resolve(reference)
        except UnsetReference as exc:
            kind, _, name = reference.partition(":")
            fix = (
                f"export {name}=<the API key> there"
                if kind == "env"
                else f"create it holding the API key: prefect block create secret (name {name!r})"
            )
            raise ConfigError(
                f"api_key {reference!r} names {exc.names}; {fix}, or give --api-key the reference where "
                "the key is (env:NAME or secret:NAME; the key itself is never given)"
            ) from None

    def endpoint(self, provider: Provider) -> str:
        """``provider base-url``, credentials-free: what the model version and every message name."""
        return f"{provider} {endpoint_address(self.base(provider))}"


def endpoint_address(url: str) -> str:
    """``url`` without user, password, query or fragment, parsed (never pattern-matched)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<not a URL>"
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def check_provider(provider: str) -> Provider:
    """``provider`` if it is one Shardwise speaks to, else a ConfigError naming them."""
    if provider not in PROVIDERS:
        raise ConfigError(f"endpoint provider must be one of {', '.join(PROVIDERS)}; got {provider!r}")
    return cast(Provider, provider)
