"""The endpoint model kinds: ``openai`` (``--model openai:NAME``, a chat generator on any OpenAI-compatible
server; ``openai-embed:NAME``, an encoder over ``/v1/embeddings``) and ``anthropic`` (``anthropic:NAME``,
Anthropic's Messages API). Both own the ``endpoint`` section of the model's options
(:class:`~.options.EndpointOptions`: ``--api-base``, ``--api-key``, the rate limits, ``--batch-api``...),
run on no device of this host, and are priced by their tokens."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from shardwise.errors import ConfigError
from shardwise.model import ModelSpec
from shardwise.model.generation import Generative
from shardwise.model.kinds import KindDefaults
from shardwise.models.endpoints.options import PROVIDERS, EndpointOptions
from shardwise.pipeline.chunks import DEFAULT_CHUNK_ROWS, GENERATION_CHUNK_ROWS

__all__ = ["ANTHROPIC", "EMBED_PREFIX", "OPENAI", "EndpointKind", "endpoint_spec", "is_endpoint_name"]

EMBED_PREFIX = "openai-embed:"
"""How an embeddings model is named: ``openai-embed:NAME`` (Anthropic serves no embeddings)."""


def is_endpoint_name(name: str) -> bool:
    """Whether ``name`` chooses a remote model (``openai:``, ``anthropic:``, ``openai-embed:``)."""
    return name.startswith((*(f"{p}:" for p in PROVIDERS), EMBED_PREFIX))


@dataclass(frozen=True)
class EndpointKind(KindDefaults):
    """The remote models named with one of ``prefixes``."""

    name: str = "openai"
    prefixes: tuple[str, ...] = ("openai:", EMBED_PREFIX)
    section: str | None = "endpoint"
    options: type[BaseModel] = EndpointOptions
    section_doc: str = (
        "Remote models only (openai:NAME, anthropic:NAME, openai-embed:NAME): where the endpoint is, where "
        "its key is, and how hard it may be driven."
    )
    applies_to: str = "remote models (openai:NAME, anthropic:NAME, openai-embed:NAME)"
    one: str = "a remote model"
    providers: tuple[str, ...] = ("openai", "openai")
    """The provider whose prices each prefix's models pay (``openai-embed:`` is OpenAI's)."""

    def claims(self, model: str) -> bool:
        return model.startswith(self.prefixes)

    def spec(self, model: str) -> ModelSpec:
        return endpoint_spec(model)

    def chunk_rows(self, spec: ModelSpec) -> int:
        return GENERATION_CHUNK_ROWS if isinstance(spec, Generative) else DEFAULT_CHUNK_ROWS

    def priced_as(self, model: str) -> tuple[str, str] | None:
        """``("openai", "gpt-4o-mini")`` for ``openai:gpt-4o-mini``; None for a prefix with no name."""
        for prefix, provider in zip(self.prefixes, self.providers, strict=True):
            name = model.removeprefix(prefix)
            if model.startswith(prefix) and name:
                return provider, name
        return None

    def check_options(self, model: str, options: BaseModel) -> None:
        if isinstance(options, EndpointOptions) and options.batch_api and model.startswith(EMBED_PREFIX):
            raise ConfigError(
                f"--batch-api sends chat requests, and model {model!r} is an embeddings model; drop "
                "--batch-api, or give a chat model (openai:NAME, anthropic:NAME)"
            )


OPENAI = EndpointKind()
ANTHROPIC = EndpointKind("anthropic", ("anthropic:",), providers=("anthropic",))


def endpoint_spec(name: str, options: EndpointOptions | None = None) -> ModelSpec:
    """The spec ``name`` chooses, reached with ``options`` (default: the provider's own API)."""
    options = options or EndpointOptions()
    kind, _, model = name.partition(":")
    if not model.strip():
        raise ConfigError(f"model {name!r} names no model after {kind}:; give {kind}:MODEL_NAME")
    if name.startswith(EMBED_PREFIX):
        _require_packages(name, "openai")
        from shardwise.models.endpoints.embed import EmbeddingSpec

        return EmbeddingSpec(model, options)
    from shardwise.models.endpoints.generate import EndpointSpec
    from shardwise.models.endpoints.options import check_provider

    provider = check_provider(kind)
    _require_packages(name, provider)
    return EndpointSpec(provider, model, options)


_PACKAGES = ("pyrate_limiter", "genai_prices")
"""What every remote model needs beside its provider's SDK: the host's request budgets, the price table."""


def _require_packages(name: str, sdk: str) -> None:
    """Refuse a remote model, when it is chosen, whose packages (the ``endpoints`` extra) are not all
    installed: the SDK of ``sdk`` (a provider's name is its SDK's), the budgets and the price table. Found
    here, before anything runs, not in the first shard that sends a request or prices one."""
    import importlib.util

    missing = [package for package in (sdk, *_PACKAGES) if importlib.util.find_spec(package) is None]
    if missing:
        raise ConfigError(
            f"model {name!r} is a remote model, and the {', '.join(missing)} "
            f"package{'s are' if missing[1:] else ' is'} not installed; pip install 'shardwise[endpoints]'"
        )
