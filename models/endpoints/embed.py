"""A remote embeddings model as an encoder: ``--model openai-embed:NAME`` over ``/v1/embeddings``.

Its one output is ``embedding``, a float32 vector like every encoder's, so
the pgvector, Delta, Parquet and Iceberg sinks take it as they take MiniLM's.
Its width is ``dimensions`` when given (sent to the server, which shortens
its vectors to it where the model allows), else asked of the server once,
by embedding one short text (:meth:`EmbeddingSpec.describe`; remembered per
process).

A window's texts go out ``batch_size`` to a request, many requests at once
(:mod:`models.endpoints.calls`). A 400-class refusal of a request of several
texts is split in halves and sent again, down to the one text the server
refuses, which becomes that row's dead letter with the server's reason.
Usage is per request, not per text, so an embedding row has no token count.

The version hashes the endpoint's address, the model name and
``dimensions``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shardwise.errors import ConfigError, InputError
from shardwise.model import TEXT, ModelInfo, OutputColumn
from shardwise.model.text import coerce_text
from shardwise.models.endpoints.binding import RunBinding
from shardwise.models.endpoints.calls import Caller, budgets
from shardwise.models.endpoints.generate import ENDPOINT_MAX_LENGTH, _no_resolver
from shardwise.models.endpoints.options import EndpointOptions
from shardwise.models.endpoints.wire import Wire, make_client
from shardwise.retry_policy import RetryPolicy

if TYPE_CHECKING:
    import torch

    from shardwise.pipeline.spec import Resolver

__all__ = ["EmbeddingSpec", "EndpointEncoder"]

_widths: dict[tuple[str, str, int | None], int] = {}
"""Each endpoint model's vector width, once asked of it in this process."""
_PROBE = "Shardwise asks this endpoint how wide its vectors are."


@dataclass(frozen=True)
class EmbeddingSpec(RunBinding):
    """A remote embeddings model on an OpenAI-compatible ``/v1/embeddings``."""

    model_name: str
    options: EndpointOptions = field(default_factory=EndpointOptions)
    dimensions: int | None = None
    batch_size: int = 64
    retry: RetryPolicy = field(default_factory=RetryPolicy, compare=False)
    resolve: Resolver = field(default=_no_resolver, compare=False, repr=False)

    provider = "openai"

    def __post_init__(self) -> None:
        if not isinstance(self.model_name, str) or not self.model_name.strip():
            raise ConfigError("openai-embed: give a model name, as openai-embed:MODEL_NAME")
        if self.dimensions is not None and (type(self.dimensions) is not int or self.dimensions < 1):
            raise ConfigError(f"dimensions must be a whole number >= 1; got {self.dimensions!r}")
        if type(self.batch_size) is not int or not 1 <= self.batch_size <= 2048:
            raise ConfigError(f"batch_size must be a whole number from 1 to 2048; got {self.batch_size!r}")
        if self.options.batch_api:
            raise ConfigError(
                f"--batch-api sends chat requests, and {self.name} is an embeddings model; drop --batch-api"
            )

    @property
    def name(self) -> str:
        return f"openai-embed:{self.model_name}"

    @property
    def endpoint(self) -> str:
        return f"{self.options.endpoint('openai')} model {self.model_name!r}"

    def check_reachable(self) -> None:
        """Before anything runs: the endpoint answers, takes the key, and serves the model (see
        :mod:`models.endpoints.preflight`); with ``dimensions``, it also shortens vectors to them."""
        from shardwise.models.endpoints.preflight import check_reachable

        check_reachable("openai", self.model_name, self.options, self.resolve)
        if self.dimensions is not None:
            self._probe()  # a server that cannot shorten its vectors would refuse every row

    def _probe(self) -> int:
        """Embed one short text; its vector's width, or a ConfigError with the server's reason."""
        encoder = EndpointEncoder(self, None, width=0)
        try:
            outcome = encoder.score_window([_PROBE])[0]
        finally:
            encoder.close()
        if isinstance(outcome, InputError):
            raise ConfigError(f"{self.endpoint} would not embed a short text: {outcome}")
        return len(outcome["embedding"])

    def describe(self) -> ModelInfo:
        outputs = (OutputColumn("embedding", "vector", self.width()),)
        return ModelInfo(
            self.name, self._version(), outputs, ENDPOINT_MAX_LENGTH, inputs=TEXT, batches_itself=True
        )

    def width(self) -> int:
        """The vectors' width: ``dimensions``, else asked of the server once per process."""
        if self.dimensions is not None:
            return self.dimensions
        known = (self.options.endpoint("openai"), self.model_name, self.dimensions)
        if known not in _widths:
            _widths[known] = self._probe()
        return _widths[known]

    def load(self, device: torch.device) -> EndpointEncoder:
        return EndpointEncoder(self, device, width=self.width())

    def _version(self) -> str:
        text = "\0".join(
            ("endpoint-embed", self.options.endpoint("openai"), self.model_name, str(self.dimensions))
        )
        return hashlib.sha256(text.encode()).hexdigest()


class EndpointEncoder:
    """An :class:`EmbeddingSpec` ready to send requests: a :class:`~shardwise.model.SelfBatching` encoder."""

    def __init__(self, spec: EmbeddingSpec, device: torch.device | None, width: int) -> None:
        self.spec = spec
        self.name, self.max_length, self.device = spec.name, ENDPOINT_MAX_LENGTH, device
        self.version = spec._version()
        self.outputs = (OutputColumn("embedding", "vector", width),)
        self._width = width
        from shardwise.model.generation import GenerationSettings

        self._wire = Wire("openai", spec.model_name, GenerationSettings(), chat=True)
        options = spec.options
        key_reference = options.key_reference("openai")
        key = options.read_key("openai", spec.resolve)
        identity = f"{options.endpoint('openai')}\0{spec.model_name}\0{key_reference}"
        self.caller = Caller(
            spec.endpoint,
            lambda: make_client("openai", options.base("openai"), key, options.timeout),
            budgets(identity, options.requests_per_minute, options.tokens_per_minute),
            options.max_concurrency,
            spec.retry,
        )

    def score_window(self, values: Sequence[object]) -> list[Mapping[str, Any] | InputError]:
        """Every row's vector, requested ``batch_size`` texts at a time; one outcome per value, in order."""
        texts: list[str | InputError] = []
        for value in values:
            try:
                texts.append(coerce_text(value))
            except InputError as exc:
                texts.append(exc)
        asked = [t for t in texts if isinstance(t, str)]
        size = self.spec.batch_size
        batches = [asked[i : i + size] for i in range(0, len(asked), size)]
        results = self.caller.run(self.caller.each(batches, self._batch, self._estimate))
        flat = iter([v for batch in results for v in batch])
        return [t if isinstance(t, InputError) else next(flat) for t in texts]

    def _estimate(self, batch: Sequence[str]) -> int:
        return sum(len(t) // 4 + 1 for t in batch)

    async def _batch(self, batch: Sequence[str]) -> list[Mapping[str, Any] | InputError]:
        """A batch's vectors; a batch the server refuses is halved until the refused text is alone."""
        import numpy as np

        outcome = await self._split(batch)
        return [
            o if isinstance(o, InputError) else {"embedding": self._checked(np.asarray(o, dtype=np.float32))}
            for o in outcome
        ]

    async def _split(self, batch: Sequence[str]) -> list[list[float] | InputError]:
        from shardwise.models.endpoints.failures import classify
        from shardwise.models.endpoints.wire import MalformedAnswer

        client = await self.caller.client()
        try:
            vectors, _headers = await self._wire.embed(client, batch, self.spec.dimensions)
        except MalformedAnswer as exc:  # the texts were sent, and the answer cannot be read
            return [MalformedAnswer(f"{self.spec.endpoint}: {exc}")] * len(batch)
        except Exception as exc:
            failure = classify(exc)
            if failure is None or failure.kind != "row":
                raise  # the caller retries it, or ends the window
            if len(batch) == 1:
                return [InputError(f"{self.spec.endpoint} refused the text: {failure.reason}")]
            half = len(batch) // 2
            return [*await self._split(batch[:half]), *await self._split(batch[half:])]
        if len(vectors) != len(batch):
            raise ConfigError(f"{self.spec.endpoint} gave {len(vectors)} vectors for {len(batch)} texts")
        return list(vectors)

    def _checked(self, vector: Any) -> Any:
        if self._width and vector.shape != (self._width,):
            raise ConfigError(
                f"{self.spec.endpoint} gave a vector of {vector.shape[0]} values, and the run's results hold "
                f"{self._width}; give --dimensions {vector.shape[0]}, or a model of that width"
            )
        return vector

    def close(self) -> None:
        self.caller.close()
