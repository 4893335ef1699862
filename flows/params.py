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
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from shardwise.errors import ConfigError
from shardwise.flags import Flag, flag_name
from shardwise.flows.image_access import declared_access
from shardwise.flows.prices import check_priced, device_price_per_hour
from shardwise.kind_options import given_sections
from shardwise.model.generation import GenerationSettings
from shardwise.model.kinds import claiming, engine_names, option_sections
from shardwise.model.structured import JsonSchema
from shardwise.pipeline.spec import (
    ModelChoice,
    ResultsSpec,
    RunSettings,
    RunSpec,
    SourceSpec,
)
from shardwise.sinks.registry import results_options_model
from shardwise.sources.images import ImageAccess
from shardwise.sources.images.access import DEFAULT_MAX_BYTES, MAX_MAX_BYTES, check_bucket_name, check_root
from shardwise.sources.registry import source_options_model
from shardwise.sources.sql.names import split_table_name
from shardwise.tasks.runners import Fanout, FanoutSettings

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

ImageRoot = Annotated[str, AfterValidator(check_root)]
"""An absolute folder (see :func:`~shardwise.sources.images.access.check_root`)."""
ImageBucket = Annotated[str, AfterValidator(check_bucket_name)]

EngineName = Literal[engine_names()]  # type: ignore[valid-type]
"""The engines a causal LM may generate with: ``hf`` and the installed engine kinds (``vllm``), the
choices of the form and of ``--engine`` (see :func:`~shardwise.model.kinds.engine_names`)."""
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


class SourceParams(SourceSpec, _Section):
    """Where the rows are and how to read them."""

    image_roots: Annotated[list[ImageRoot], Flag("--image-root", "DIR")] = Field(
        [],
        description="Folders an image column's local references (paths, file:// URIs) may name, checked "
        "after symlinks and '..' are resolved; a reference outside them, or any local reference when none "
        "is declared, is a dead letter and nothing of it is read. Added to the folders in "
        "SHARDWISE_IMAGE_ROOTS (':'-separated) of the process that runs the flow. An image folder source "
        "reads its own folder without one, and a root given without image_column is refused. On the command "
        "line, --image-root DIR once per folder (docs: how-to/security.md#image-references).",
    )
    image_buckets: Annotated[list[ImageBucket], Flag("--image-bucket", "BUCKET")] = Field(
        [],
        description="S3 buckets an image column's s3:// references may name besides the source's own (a "
        "source on S3); a reference into any other bucket is a dead letter, nothing fetched. Added to the "
        "names in SHARDWISE_IMAGE_BUCKETS (':'-separated) of the process that runs the flow. On the command "
        "line, --image-bucket NAME once per bucket. Refused without image_column, like image_roots.",
    )
    image_max_bytes: Annotated[int, Flag(metavar="BYTES")] = Field(
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
    source_name: Annotated[str | None, Flag(commands=())] = Field(  # deployments name the source
        None,
        description="Name of the source in events (shardwise.source.NAME); defaults to the table "
        "or the last path component.",
    )

    def spec(self) -> SourceSpec:
        """The engine's :class:`SourceSpec`: these, less what only the flow reads, with the options of
        the kinds given (a section set away from its defaults)."""
        shared = {name: getattr(self, name) for name in SourceSpec.model_fields}
        return SourceSpec(**shared | {"options": given_sections(self.options)})

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


class _GenerationSection(_Section):
    """The rules of the form's generation section, and the settings it gives; its fields are those of
    :class:`GenerationSettings`, each left empty for the generator's default (:data:`GenerationParams`)."""

    @model_validator(mode="after")
    def _sampling_applies(self) -> _GenerationSection:
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

    @field_validator("json_schema", mode="before", check_fields=False)
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

    @field_validator("json_schema", check_fields=False)
    @classmethod
    def _a_schema(cls, value: str | None) -> str | None:
        """A valid JSON Schema: refused here, in the form or before the command line starts a flow run."""
        if value is not None:
            try:
                JsonSchema.from_text(value)
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return value


_UNCONSTRAINED = (
    "Generators only, with json_schema: only validate the outputs, without holding decoding to the schema "
    "(no structured extra needed; invalid outputs become dead letters)."
)
_ENGINE_OPTIONS = (
    "Generators with engine vllm only: the engine's own settings, one NAME=VALUE each, e.g. "
    "max_num_seqs=128 or gpu_memory_utilization=0.8 (docs: how-to/vllm.md)."
)


def _left_empty(settings: type[BaseModel], **retyped: Any) -> dict[str, Any]:
    """``settings``' fields as a form's section gives them, in their order: each optional, left empty
    (None) for the default, with its description and bounds. ``retyped`` gives a field another type, or
    a whole ``(name, type, field)`` where the form spells it otherwise."""
    fields: dict[str, Any] = {}
    for name, info in settings.model_fields.items():
        spelled = retyped.get(name, info.annotation)
        if isinstance(spelled, tuple):
            fields[spelled[0]] = spelled[1:]
        else:
            fields[name] = (spelled | None, FieldInfo.merge_field_infos(info, default=None))
    return fields


GenerationParams = create_model(  # type: ignore[call-overload]
    "GenerationParams",
    __base__=_GenerationSection,
    __module__=__name__,
    __doc__="Generators only: how a causal language model turns a row into a prompt and picks tokens; "
    "part of the model version. A field left empty keeps the generator's default.",
    **_left_empty(
        GenerationSettings,
        constrained=("unconstrained", bool, Field(False, description=_UNCONSTRAINED)),
        engine=EngineName,
        engine_options=("engine_options", list[str] | None, Field(None, description=_ENGINE_OPTIONS)),
    ),
)
"""The model section's ``generation``: :class:`GenerationSettings`' fields, each left empty (None) for the
generator's default, in the command line's spellings: ``unconstrained`` for ``constrained`` turned off,
``engine_options`` as NAME=VALUE texts, ``engine`` one of those installed."""


def _name_value(item: str) -> tuple[str, str]:
    """``NAME=VALUE`` as a pair; the engine checks the name and reads the value as its setting's type."""
    name, equals, value = item.partition("=")
    if not equals or not name.strip():
        raise ValueError(
            f"engine option {item!r} is not NAME=VALUE; give one setting each, e.g. max_num_seqs=128"
        )
    return name.strip(), value.strip()


class _ModelSection(_Section):
    """The rules of the model section, and the :class:`ModelChoice` it gives; its fields are the model's
    name, the generation section and a section per model kind that has options (:data:`ModelParams`)."""

    @model_validator(mode="after")
    def _options_apply(self) -> _ModelSection:
        """A kind's options for a model of another kind would do nothing: refused, not ignored (a default
        spelled out is not given); the model's own kind checks the rest."""
        kind = claiming(self.name)
        for section, owner in option_sections().items():
            given = sorted(getattr(self, section).model_dump(exclude_defaults=True))
            if given and (kind is None or kind.section != section):
                flags = " and ".join(flag_name(name, owner.options.model_fields[name]) for name in given)
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
        return ModelChoice(name=self.name, generation=self.generation.settings(), options=options)


ModelParams = create_model(  # type: ignore[call-overload]
    "ModelParams",
    __base__=_ModelSection,
    __module__=__name__,
    __doc__="The model, a generator's settings, and a remote model's endpoint.",
    name=(str, ModelChoice.model_fields["name"]),
    generation=(  # the form's spelling of ModelChoice's generation
        GenerationParams,
        Field(
            default_factory=GenerationParams,
            description="Generators only: the prompt and the sampling settings, part of the model version.",
        ),
    ),
    **{
        section: (kind.options, Field(default_factory=kind.options, description=kind.section_doc))
        for section, kind in option_sections().items()
    },
)
"""The model section: its name and a generator's settings, and a section of options per installed model
kind that has any (``endpoint``: the remote models'; see :mod:`shardwise.model.kinds`)."""


class ResultsParams(ResultsSpec, _Section):
    """Where the results go, and the options of their kind."""

    options: ResultsOptions = Field(  # type: ignore[valid-type]
        default_factory=ResultsOptions,
        description="Options of the sink kinds, a section each (sql: pgvector's column type and index; "
        "others as installed); only the section of the results' kind applies, and an option set in "
        "another is refused. On the command line, each is its own flag (--index, --embedding-type, ...).",
    )

    def spec(self) -> ResultsSpec:
        """The engine's :class:`ResultsSpec`, with the options of the kinds given."""
        shared = {name: getattr(self, name) for name in ResultsSpec.model_fields}
        return ResultsSpec(**shared | {"options": given_sections(self.options)})


class RunParams(RunSettings, _Section):
    """How the run is planned, scored, retried and resumed."""

    dry_run: Annotated[bool, Flag(commands=())] = Field(  # plan implies it
        False, description="Only plan: report shards, rows, prompt tokens, cost and what only-new skips."
    )

    def settings(self) -> RunSettings:
        """The engine's :class:`RunSettings`: these, less what only the flow reads (``dry_run``)."""
        return RunSettings.model_validate(self.model_dump(exclude={"dry_run"}))


class FanoutParams(FanoutSettings, _Section):
    """What runs the shards (README: Scaling out)."""


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
    ledger: Annotated[str | None, Flag(metavar="URL|env:NAME")] = Field(
        None,
        description="Where the run ledger (runs, shards, dead letters) lives: a database URL or "
        "connection name. Default: the results database, else the source database, else an SQLite file "
        "(LOCATION/shardwise_ledger.db beside local results, ~/.shardwise/ledger.db for S3).",
    )
    triggered_by: Annotated[str | None, Flag(commands=())] = Field(  # set by event triggers
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
        run = self.run
        price = device_price_per_hour(run.device_price_per_hour)
        check_priced(self.model.name, price, run.budget_usd)
        return RunSpec(
            source=self.source.spec(),
            results=self.results.spec(),
            model=self.model.choice(),
            ledger=self.ledger,
            run=run.settings().replace(device_price_per_hour=price),
            image_access=self.image_access(),
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
        return Fanout.of(self.fanout, device=self.run.device)
