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
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol, get_args, runtime_checkable

from shardwise.errors import ConfigError
from shardwise.model import ModelSpec
from shardwise.model.kinds import DEFAULT_ENGINE, engine_of
from shardwise.model.structured import JsonSchema

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
SETTINGS = (
    "prompt",
    "system",
    "chat",
    "max_new_tokens",
    "temperature",
    "top_p",
    "seed",
    "json_schema",
    "unconstrained",
    "engine",
    "engine_options",
)
"""The generation settings' names as run parameters (``unconstrained`` is :class:`GenerationSettings`'s
``constrained`` turned off)."""


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


@dataclass(frozen=True)
class GenerationSettings:
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

    prompt: str = DEFAULT_PROMPT
    system: str | None = None
    chat: ChatMode = "auto"
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    json_schema: str | None = None
    constrained: bool = True
    engine: str = DEFAULT_ENGINE
    """What runs the model: ``hf``, Shardwise's own loop over the Hugging Face module (any device, no extra),
    or an engine kind by its name (``vllm``: paged attention, prefix caching; the ``vllm`` package): see
    :func:`~shardwise.model.kinds.engine_names`."""
    engine_options: tuple[tuple[str, Any], ...] = ()
    """The engine's own settings, by name, as pairs sorted by name (a mapping is taken too, and stored
    so: settings are hashable). Each engine checks its own (``vllm``: ``max_num_seqs``,
    ``gpu_memory_utilization``, ...); ``hf`` takes none."""

    def __post_init__(self) -> None:
        if not placeholders(self.prompt):
            raise ConfigError(
                f"prompt {self.prompt!r} names no column; put the text column in it, e.g. "
                "'Summarise: {text}'"
            )
        if self.chat not in get_args(ChatMode):
            raise ConfigError(f"chat must be one of auto, on, off; got {self.chat!r}")
        _check_number("max_new_tokens", self.max_new_tokens, 1, None, integer=True)
        _check_number("temperature", self.temperature, 0.0, None)
        _check_number("top_p", self.top_p, 0.0, 1.0, open_low=True)
        _check_number("seed", self.seed, 0, None, integer=True)
        # 1 and 1.0 are one setting, and the version's text must not tell them apart: a notebook's
        # temperature=1 and the form's or the command line's 1.0 must not make --only-new rescore.
        object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "top_p", float(self.top_p))
        if self.json_schema is not None:
            # Canonical text: the same schema written with other spacing or key order is the same version.
            object.__setattr__(self, "json_schema", self.schema().text)  # type: ignore[union-attr]
        if not isinstance(self.constrained, bool):
            raise ConfigError(f"constrained must be true or false; got {self.constrained!r}")
        own_loop = engine_of(self.engine) is None  # refuses an engine no kind is
        try:
            pairs = tuple(sorted(dict(self.engine_options).items()))
        except (TypeError, ValueError):
            raise ConfigError(
                f"engine_options must map setting names to values; got {self.engine_options!r}"
            ) from None
        if pairs and own_loop:
            raise ConfigError(
                f"engine_options {dict(pairs)!r} are settings of an engine, and engine hf takes none; "
                "give --engine vllm, or drop --engine-option"
            )
        object.__setattr__(self, "engine_options", pairs)

    def schema(self) -> JsonSchema | None:
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
        fields = asdict(self)
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


def _check_number(
    name: str, value: object, low: float, high: float | None, *, integer: bool = False, open_low: bool = False
) -> None:
    """Raise a ConfigError naming the rule unless ``value`` is a number in range (an int if ``integer``)."""
    kind = int if integer else (int, float)
    ok = isinstance(value, kind) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        assert isinstance(value, int | float)
        ok = (value > low if open_low else value >= low) and (high is None or value <= high)
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
