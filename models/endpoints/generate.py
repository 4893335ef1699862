"""A remote chat model as a text generator: ``--model openai:NAME`` or ``--model anthropic:NAME``.

:class:`EndpointSpec` is plain data (provider, model name, options,
generation settings, retry policy, resolver): it pickles to any worker.
Loaded, it is an :class:`EndpointGenerator`, a
:class:`~shardwise.model.SelfBatching` model: the engine gives it a window
of rows, it sends them all at once (bounded by ``max_concurrency``, paced by
the host's budgets, retried under the run's deadline,
:mod:`models.endpoints.calls`) and gives one outcome per row, in input order.

Each row's text fills the prompt template (``{column}`` placeholders, filled
from the row's columns by name) with plain ``str.format_map``; with chat
``auto`` or ``on`` the system text and the prompt are the messages of a chat
request, with chat ``off`` (OpenAI-compatible servers only) the system text
and the prompt joined by a blank line are a plain completion's prompt.
Sampling is the run's: greedy at temperature 0; above it ``top_p`` and a
per-row seed drawn from ``seed`` and the row's prompt (OpenAI-compatible
servers; Anthropic takes no seed). With a JSON Schema it is sent as the
endpoint's structured-output format (OpenAI's ``response_format``,
Anthropic's ``output_config.format``) unless ``unconstrained``, and every
answer is validated on return: one that is not JSON under the schema is the
row's dead letter with the reason.

Outputs: ``generated_text``, ``finish_reason`` (``stop``, ``length``, or the
server's own word such as ``content_filter``), ``prompt_tokens``,
``completion_tokens`` and ``cached_tokens`` (from the answer's usage; a
server that reports none counts 0), ``system_fingerprint`` (the server's
build, per row, when it sends one), and ``parsed`` with a schema.

The version hashes the provider, the endpoint's address (no credentials),
the model name, chat or plain, and the generation settings: another server,
model or prompt is another version; limits and keys are not part of it, nor
is ``--batch-api`` (the same model and request body, answered later: see
:mod:`models.endpoints.options`).

With ``--batch-api`` the generator is also a
:class:`~shardwise.model.recorded.Recorded` model: a window becomes provider
batches (:meth:`EndpointGenerator.score_recorded`), each recorded in the
run's ledger before it is waited on, and collected instead of submitted when
a resumed or retried shard finds it recorded.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shardwise.errors import ConfigError, InputError, ShardwiseError
from shardwise.model import TEXT, ModelInfo, OutputColumn
from shardwise.model.generation import GenerationSettings, placeholders
from shardwise.model.kinds import engine_of
from shardwise.model.recorded import ProviderBatch, WindowRef
from shardwise.model.text import prompt_fields
from shardwise.models.endpoints.batches import COMPLETION_WINDOW_S, LOST, BatchLost, cut
from shardwise.models.endpoints.binding import RunBinding
from shardwise.models.endpoints.calls import Caller, budgets
from shardwise.models.endpoints.failures import classify
from shardwise.models.endpoints.options import EndpointOptions, Provider, check_provider
from shardwise.models.endpoints.wire import Reply, Wire, make_client
from shardwise.retry_policy import RetryPolicy

if TYPE_CHECKING:
    import torch

    from shardwise.models.hf.causal.prompt import PromptRenderer
    from shardwise.pipeline.spec import Resolver

__all__ = [
    "ENDPOINT_MAX_LENGTH",
    "OUTPUTS",
    "PARSED",
    "TOKENS_RULE",
    "EndpointGenerator",
    "EndpointPrompts",
    "EndpointSpec",
    "EstimatedPrompt",
]

_log = logging.getLogger(__name__)
Outcome = Mapping[str, Any] | InputError

OUTPUTS = (
    OutputColumn("generated_text", "text"),
    OutputColumn("finish_reason", "text"),
    OutputColumn("prompt_tokens", "int", count=True),
    OutputColumn("completion_tokens", "int", count=True),
    OutputColumn("cached_tokens", "int", count=True),
    OutputColumn("system_fingerprint", "text"),
)
PARSED = OutputColumn("parsed", "json")
ENDPOINT_MAX_LENGTH = 1 << 20
"""What :attr:`ModelInfo.max_length` says of a remote model: its context is the server's business, and a
prompt longer than it is refused by the server, for that row (a dead letter with the server's reason)."""


def _no_resolver(connection: str) -> str:
    raise ConfigError(
        f"the endpoint's API key is named {connection!r}, and this caller gave no resolver to read it; "
        "run through the flow, or give the spec a resolver (spec.resolving(resolve))"
    )


@dataclass(frozen=True)
class EndpointSpec(RunBinding):
    """A remote chat model: which provider, which model, where, and how it generates."""

    provider: Provider
    model_name: str
    options: EndpointOptions = field(default_factory=EndpointOptions)
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    retry: RetryPolicy = field(default_factory=RetryPolicy, compare=False)
    resolve: Resolver = field(default=_no_resolver, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_provider(self.provider)
        if not isinstance(self.model_name, str) or not self.model_name.strip():
            raise ConfigError(f"{self.provider}: give a model name, as {self.provider}:MODEL_NAME")
        check_generation(self.generation, self.provider)
        if self.options.batch_api and self.generation.chat == "off":
            raise ConfigError(
                f"--batch-api sends chat requests, and {self.provider}:{self.model_name} is set to send "
                "plain completions (chat off); use chat auto or on, or drop --batch-api"
            )

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.model_name}"

    @property
    def endpoint(self) -> str:
        return f"{self.options.endpoint(self.provider)} model {self.model_name!r}"

    def generating(self, settings: GenerationSettings) -> EndpointSpec:
        """The same endpoint generating with ``settings``."""
        return replace(self, generation=settings)

    def chat(self) -> bool:
        """Whether rows go as chat messages; chat off is a plain completion, which Anthropic lacks."""
        return self.generation.chat != "off"

    def describe(self) -> ModelInfo:
        outputs = OUTPUTS if self.generation.json_schema is None else (*OUTPUTS, PARSED)
        return ModelInfo(
            self.name,
            self._version(),
            outputs,
            ENDPOINT_MAX_LENGTH,
            inputs=TEXT,
            batches_itself=True,
            batch_priced=self.options.batch_api,
        )

    def check_prompts(self) -> None:
        """Nothing to render ahead: the prompt is a plain template, checked with the settings."""

    def check_reachable(self) -> None:
        """Before anything runs: the endpoint answers, takes the key, and serves the model.

        Raises a :class:`~shardwise.errors.ConfigError` (a refused key, an unknown model) or
        :class:`~models.endpoints.failures.EndpointUnreachable` (nothing answers), in one line naming the
        endpoint, never the key.
        """
        from shardwise.models.endpoints.preflight import check_reachable

        check_reachable(self.provider, self.model_name, self.options, self.resolve)

    def load(self, device: torch.device) -> EndpointGenerator:
        return EndpointGenerator(self, device)

    def prompt_counter(self) -> EndpointPrompts | PromptRenderer:
        """The rows' prompts for a plan to count: with the tokenizer the options name, rendered and
        tokenized as an OpenAI-compatible server renders them (its chat template, or the system text
        and the prompt joined by a blank line); else their tokens estimated (:data:`TOKENS_RULE`)."""
        if self.options.tokenizer is None:
            return EndpointPrompts(self.generation)
        from shardwise.models.hf.causal.prompt import PromptRenderer, load_tokenizer  # torch: only when asked

        folder = Path(self.options.tokenizer).expanduser()
        try:
            tokenizer = load_tokenizer(folder, {"local_files_only": True})
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"tokenizer {str(folder)!r} holds no tokenizer transformers can load ({type(exc).__name__}); "
                "give the local folder of the served model's tokenizer (tokenizer.json or "
                "tokenizer_config.json), or drop --tokenizer to estimate"
            ) from None
        counter = PromptRenderer(self.name, self.generation, self.chat(), tokenizer, ENDPOINT_MAX_LENGTH)
        counter.estimated = f"the tokenizer at {folder}, which --tokenizer names as the server's"
        return counter

    def _version(self) -> str:
        text = "\0".join(
            (
                "endpoint",
                self.options.endpoint(self.provider),
                self.model_name,
                "chat" if self.chat() else "plain",
                self.generation.token(),
            )
        )
        return hashlib.sha256(text.encode()).hexdigest()


def check_generation(settings: GenerationSettings, provider: Provider) -> None:
    """Refuse settings an endpoint cannot honour, in one line naming the fix."""
    if engine_of(settings.engine) is not None or settings.engine_options:
        raise ConfigError(
            f"engine {settings.engine!r} runs a local model, and {provider}: models run on the endpoint; "
            "drop --engine and --engine-option"
        )
    if provider == "anthropic" and settings.chat == "off":
        raise ConfigError(
            "chat off sends a plain completion, and Anthropic's Messages API takes chat messages only; "
            "use chat auto or on"
        )


TOKENS_RULE = "no tokenizer: 4 characters a token over the system text and the prompt, plus one"
"""How a remote model's prompt tokens are estimated before it is asked (its tokenizer is the server's)."""


@dataclass(frozen=True)
class EstimatedPrompt:
    """A row's prompt tokens as :class:`EndpointPrompts` estimates them, and its reply cap."""

    prompt_tokens: int
    max_new_tokens: int


class EndpointPrompts:
    """A remote model's rows' prompts: the template filled from a row, and its tokens estimated.

    The tokenizer is the server's, so the tokens are estimated by :data:`TOKENS_RULE`: what the
    requests' token budget reserves (:mod:`models.endpoints.calls`), and what a plan counts (a
    :class:`~shardwise.model.PromptCounter`)."""

    estimated: str | None = TOKENS_RULE

    def __init__(self, settings: GenerationSettings) -> None:
        self.settings = settings
        self._fields = placeholders(settings.prompt)

    def render(self, value: object) -> str:
        """A row's prompt body: the template's placeholders filled from its columns (see
        :func:`~shardwise.model.text.prompt_fields`)."""
        return self.settings.prompt.format_map(prompt_fields(self._fields, value))

    def tokens(self, body: str) -> int:
        """A prompt body's tokens, estimated by :data:`TOKENS_RULE`."""
        return (len(body) + len(self.settings.system or "")) // 4 + 1

    def prompt(self, value: object) -> EstimatedPrompt:
        return EstimatedPrompt(self.tokens(self.render(value)), self.settings.max_new_tokens)


class EndpointGenerator:
    """An :class:`EndpointSpec` ready to send requests: a :class:`~shardwise.model.SelfBatching` model."""

    def __init__(self, spec: EndpointSpec, device: torch.device) -> None:
        self.spec = spec
        info = spec.describe()
        self.name, self.version, self.max_length, self.outputs = (
            info.name,
            info.version,
            info.max_length,
            info.outputs,
        )
        self.device = device
        self.completion_window_s = COMPLETION_WINDOW_S
        """How long after its submission a batch may run before its rows are dead letters (the providers'
        24 hours; a test shortens it)."""
        self.settings = spec.generation
        self.prompts = EndpointPrompts(spec.generation)
        self._schema = self.settings.output_schema()
        self._wire = Wire(spec.provider, spec.model_name, self.settings, spec.chat())
        options, provider = spec.options, spec.provider
        key_reference = options.key_reference(provider)
        key = options.read_key(provider, spec.resolve)  # never kept beyond the client, never shown
        identity = f"{options.endpoint(provider)}\0{spec.model_name}\0{key_reference}"
        self.caller = Caller(
            spec.endpoint,
            lambda: make_client(provider, options.base(provider), key, options.timeout),
            budgets(identity, options.requests_per_minute, options.tokens_per_minute),
            options.max_concurrency,
            spec.retry,
        )

    def render(self, value: object) -> str:
        """A row's prompt body: the template filled from its columns."""
        return self.prompts.render(value)

    def score_window(self, values: Sequence[object]) -> list[Mapping[str, Any] | InputError]:
        """Every row's answer, requested together; one outcome per value, in input order."""
        bodies: list[str | InputError] = []
        for value in values:
            try:
                bodies.append(self.render(value))
            except InputError as exc:
                bodies.append(exc)
        asked = [b for b in bodies if isinstance(b, str)]
        replies = iter(self.caller.run(self.caller.each(asked, self._send, self._estimate)))
        return [b if isinstance(b, InputError) else self._outcome(next(replies)) for b in bodies]

    def score_recorded(self, values: Sequence[object], window: WindowRef) -> list[Outcome]:
        """With ``--batch-api``: the window's rows as provider batches, recorded, awaited and collected;
        without it, :meth:`score_window`. One outcome per value, in input order.

        The rows are cut to the provider's limits (:func:`~models.endpoints.batches.cut`). A batch the
        run's ledger recorded for this window (a killed or retried attempt submitted it) is collected,
        never submitted again; any other is submitted and its id recorded, committed, before anything
        waits on it. Then every ``batch_poll_s`` seconds each running batch is looked at, until all have
        ended or the 24-hour completion window (from when each was submitted) has passed. A line that
        errored or expired, and every row of a batch that outlived its window, is a dead letter with the
        reason.
        """
        if not self.spec.options.batch_api:
            return self.score_window(values)
        bodies, refused = self._bodies(zip(window.keys, values, strict=True))
        batches = self._batches()
        runs = cut(bodies, batches.size, self.spec.provider)
        found: dict[str, Outcome] = {**refused, **self._awaited(window, self._submitted(window, runs), runs)}
        return [found[key] for key in window.keys]

    def _bodies(
        self, rows: Iterable[tuple[str, object]]
    ) -> tuple[list[tuple[str, str]], dict[str, InputError]]:
        """``(key, prompt body)`` of the rows that render, and the refusals of those that do not, by key."""
        bodies: list[tuple[str, str]] = []
        refused: dict[str, InputError] = {}
        for key, value in rows:
            try:
                bodies.append((key, self.render(value)))
            except InputError as exc:
                refused[key] = exc
        return bodies, refused

    def _submitted(self, window: WindowRef, runs: list[list[tuple[str, str]]]) -> list[ProviderBatch]:
        """Each run's batch: the one recorded for this window, or a new one, recorded before it returns."""
        recorded = {batch.batch_index: batch for batch in window.book.recorded(window)}
        batches: list[ProviderBatch] = []
        for index, run in enumerate(runs):
            batch = recorded.get(index)
            if batch is None or batch.status == LOST:
                batch_id = self._submit(run, window.book.label(window, index))
                batch = ProviderBatch(
                    index, self.spec.provider, batch_id, len(run), datetime.now(timezone.utc)
                )
                window.book.record(window, batch)  # committed before anything waits on it
                _log.info("%s: submitted batch %s of %d rows", self.spec.endpoint, batch_id, len(run))
            elif batch.rows_sent != len(run):
                raise ShardwiseError(
                    f"provider batch {batch.batch_id} was recorded with {batch.rows_sent} rows for this "
                    f"window, and the window now cuts to {len(run)}: its rows or prompt changed under the "
                    "run; start a new run"
                )
            else:
                _log.info("%s: collects recorded batch %s", self.spec.endpoint, batch.batch_id)
            batches.append(batch)
        return batches

    def _awaited(
        self, window: WindowRef, batches: list[ProviderBatch], runs: list[list[tuple[str, str]]]
    ) -> dict[str, Outcome]:
        """Every batch's outcomes by key, looked at every ``batch_poll_s`` seconds until each has ended
        or outlived the completion window; each end is recorded with the batch's final status."""
        pending = {
            batch.batch_index: (batch, [key for key, _ in run])
            for batch, run in zip(batches, runs, strict=True)
        }
        found: dict[str, Outcome] = {}
        while True:
            for index, (batch, keys) in list(pending.items()):
                try:
                    status, outcomes = self._look(batch.batch_id, keys)
                except BatchLost as lost:
                    window.book.ended(window, index, LOST)  # the next attempt submits its rows anew
                    gone: BatchLost | None = lost.of_rows(len(keys))
                else:
                    gone = None
                if gone is not None:  # raised outside the except: it carries no context to pickle
                    raise gone
                if outcomes is None and self._outlived(batch):
                    status = "timed out"
                    late = InputError(
                        f"batch {batch.batch_id} did not end within the provider's 24-hour completion "
                        f"window (submitted {batch.submitted_at:%Y-%m-%d %H:%M} UTC)"
                    )
                    outcomes = dict.fromkeys(keys, late)
                if outcomes is not None:
                    found.update(outcomes)
                    window.book.ended(window, index, status)
                    del pending[index]
            if not pending:
                return found
            window.book.waiting(window)  # a worker told to stop lets the shard go here
            time.sleep(self.spec.options.batch_poll_s)

    def _outlived(self, batch: ProviderBatch) -> bool:
        return (datetime.now(timezone.utc) - batch.submitted_at).total_seconds() > self.completion_window_s

    async def _send(self, body: str) -> Reply:
        return await self._wire.generate(await self.caller.client(), body)

    def _estimate(self, body: str) -> int:
        """Tokens a request may cost, guessed before sending: its prompt's estimate, plus the reply cap."""
        return self.prompts.tokens(body) + self.settings.max_new_tokens

    def _outcome(self, reply: Reply | InputError) -> Mapping[str, Any] | InputError:
        if isinstance(reply, InputError):
            return reply
        values: dict[str, Any] = {
            "generated_text": reply.text.replace("\0", ""),
            "finish_reason": reply.finish_reason,
            # Counts are summed by the run: a server that reports no usage counts 0, never null.
            "prompt_tokens": reply.prompt_tokens or 0,
            "completion_tokens": reply.completion_tokens or 0,
            "cached_tokens": reply.cached_tokens or 0,
            "system_fingerprint": reply.system_fingerprint,
        }
        if self._schema is not None:
            try:
                values["parsed"] = self._schema.parse(values["generated_text"])
            except InputError as exc:  # an OutputError: the row ran, and its answer broke the schema
                return exc
        return values

    def submit_batch(self, rows: Sequence[tuple[str, object]]) -> tuple[str | None, dict[str, InputError]]:
        """Submit ``(key, value)`` rows as one provider batch (the Batch API, half price, asynchronous).

        Gives the batch id, to be recorded before anything waits on it (None when no row could be sent),
        and the rows refused before sending (a null text, a missing column) by key. The rows must fit
        one batch: cut them with :func:`models.endpoints.batches.cut` first.
        """
        bodies, refused = self._bodies(rows)
        return (self._submit(bodies, None) if bodies else None), refused

    def _submit(self, bodies: Sequence[tuple[str, str]], label: str | None) -> str:
        """Create one provider batch of ``(key, prompt body)`` rows, labelled where the provider keeps
        one (see :meth:`~shardwise.model.recorded.BatchBook.label`); its id."""
        batches = self._batches()

        async def submit() -> str:
            return str(await batches.submit(await self.caller.client(), batches.lines(bodies), label))

        return self.caller.run(submit())

    def collect_batch(
        self, batch_id: str, keys: Sequence[str]
    ) -> dict[str, Mapping[str, Any] | InputError] | None:
        """The outcomes of a batch submitted earlier, by key, once it has ended; None while it runs.

        A key with no line in the batch's files (it expired or was cancelled first) is a dead letter
        naming the batch and its status. Polling is the caller's: it waits between calls (a flow may
        pause), so a crash between two polls loses nothing.
        """
        return self._look(batch_id, keys)[1]

    def _look(self, batch_id: str, keys: Sequence[str]) -> tuple[str, dict[str, Outcome] | None]:
        """The batch's status, and its outcomes by key once it has ended (None while it runs)."""
        batches = self._batches()

        async def collect() -> tuple[str, dict[str, Reply | InputError] | None]:
            client = await self.caller.client()
            try:
                state = await batches.state(client, batch_id)
            except Exception as exc:
                failure = classify(exc)
                if failure is None or failure.status != 404:
                    raise
                lost: BatchLost | None = BatchLost(self.spec.endpoint, batch_id, failure.reason)
            else:
                lost = None
            if lost is not None:
                # raised outside the except, so the SDK's error is not its __context__: Dask's workers
                # pickle an error with its context (tblib), and an SDK error does not unpickle
                raise lost
            if not state.ended:
                return state.status, None
            found = await batches.collect(client, state)
            if state.status == "failed":
                _log.warning("%s: batch %s failed: %s", self.spec.endpoint, batch_id, state.reason)
            missing = state.unran()
            return state.status, {key: found.get(key, missing) for key in keys}

        status, replies = self.caller.run(collect())
        if replies is None:
            return status, None
        return status, {key: self._outcome(reply) for key, reply in replies.items()}

    def _batches(self) -> Any:
        from shardwise.models.endpoints.batches import AnthropicBatches, OpenAIBatches

        if not self.spec.chat():
            raise ConfigError(
                f"the Batch API sends chat requests, and {self.spec.name} sends plain completions (chat "
                "off); use chat auto or on, or drop --batch-api"
            )
        return OpenAIBatches(self._wire) if self.spec.provider == "openai" else AnthropicBatches(self._wire)

    def close(self) -> None:
        """Close the connections and the loop thread."""
        self.caller.close()
