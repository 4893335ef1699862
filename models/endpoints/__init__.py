"""Remote models: any OpenAI-compatible server or Anthropic's Messages API, as a model kind.

``--model openai:NAME`` or ``--model anthropic:NAME`` is a chat generator
(:mod:`.generate`); ``--model openai-embed:NAME`` an encoder over
``/v1/embeddings`` (:mod:`.embed`). Both batch by themselves
(:class:`~shardwise.model.SelfBatching`): a window of rows goes out as many
requests at once, bounded, paced by the host's budgets (:mod:`.budget`) and
retried under the run's deadline (:mod:`.calls`); their options are
:class:`~.options.EndpointOptions`. The SDKs (``openai``, ``anthropic``) and
pyrate-limiter come with the ``endpoints`` extra, and are imported only when
such a model is chosen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardwise.lazy import lazy_exports
from shardwise.models.endpoints.options import PROVIDERS, EndpointOptions

if TYPE_CHECKING:
    from shardwise.model import ModelSpec
    from shardwise.models.endpoints.embed import EmbeddingSpec
    from shardwise.models.endpoints.generate import EndpointSpec

__all__ = [
    "EMBED_PREFIX",
    "PROVIDERS",
    "EmbeddingSpec",
    "EndpointOptions",
    "EndpointSpec",
    "endpoint_spec",
    "is_endpoint_name",
]

EMBED_PREFIX = "openai-embed:"
"""How an embeddings model is named: ``openai-embed:NAME`` (Anthropic serves no embeddings)."""

__getattr__ = lazy_exports(__name__, {".embed": ("EmbeddingSpec",), ".generate": ("EndpointSpec",)})


def is_endpoint_name(name: str) -> bool:
    """Whether ``name`` chooses a remote model (``openai:``, ``anthropic:``, ``openai-embed:``)."""
    return name.startswith((*(f"{p}:" for p in PROVIDERS), EMBED_PREFIX))


def endpoint_spec(name: str, options: EndpointOptions | None = None) -> ModelSpec:
    """The spec ``name`` chooses, reached with ``options`` (default: the provider's own API)."""
    from shardwise.errors import ConfigError

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

    from shardwise.errors import ConfigError

    missing = [package for package in (sdk, *_PACKAGES) if importlib.util.find_spec(package) is None]
    if missing:
        raise ConfigError(
            f"model {name!r} is a remote model, and the {', '.join(missing)} "
            f"package{'s are' if missing[1:] else ' is'} not installed; pip install 'shardwise[endpoints]'"
        )
