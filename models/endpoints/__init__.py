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
    from shardwise.models.endpoints.embed import EmbeddingSpec
    from shardwise.models.endpoints.generate import EndpointSpec
    from shardwise.models.endpoints.kind import EMBED_PREFIX, endpoint_spec, is_endpoint_name

__all__ = [
    "EMBED_PREFIX",
    "PROVIDERS",
    "EmbeddingSpec",
    "EndpointOptions",
    "EndpointSpec",
    "endpoint_spec",
    "is_endpoint_name",
]

__getattr__ = lazy_exports(
    __name__,
    {
        ".embed": ("EmbeddingSpec",),
        ".generate": ("EndpointSpec",),
        ".kind": ("EMBED_PREFIX", "endpoint_spec", "is_endpoint_name"),
    },
)
