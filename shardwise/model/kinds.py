"""Model kinds: what a ``--model`` value is, and what the pipeline asks of it instead of branching on it.

A model kind claims some ``--model`` values (a directory, a ``.gguf`` file, a prefix such as ``openai:``,
a catalogue name, ``package.module:attribute``), makes their specs, owns its options (a section of the
model's parameters, each option a flag) and answers the pipeline's questions: how many rows a chunk holds,
whether the model is remote (reached over the network and priced by its tokens, not run on a device of
this host), whether naming it imports code. A kind is an object registered in the entry-point group
``shardwise.model_kinds``; Shardwise registers its own there exactly as another package would::

    [project.entry-points."shardwise.model_kinds"]
    text-length = "text_length_kind:KIND"

Shardwise's own kinds are asked first, then the plug-ins' by name; the first that claims a value makes
its spec. A kind that cannot be loaded is left out, saying why when asked for, and never breaks the others.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

from shardwise.entry_points import KindRegistry
from shardwise.errors import ConfigError
from shardwise.kind_options import KindOptions
from shardwise.model import ModelSpec

__all__ = [
    "DEFAULT_ENGINE",
    "ENTRY_POINT_GROUP",
    "Engine",
    "KindDefaults",
    "ModelKind",
    "claiming",
    "clear_cache",
    "engine_names",
    "engine_of",
    "load_model_kinds",
    "model_kind",
    "model_kinds",
    "option_sections",
]

ENTRY_POINT_GROUP = "shardwise.model_kinds"
DEFAULT_ENGINE = "hf"
"""The engine a causal LM generates with unless its settings name another: Shardwise's own loop over the
Hugging Face module (any device, no extra)."""


@runtime_checkable
class ModelKind(Protocol):
    """One kind of model: the ``--model`` values it claims, its options, and its answers to the pipeline.

    ``section`` names its options' section of the model parameters (``model.endpoint``; None: it has no
    options), whose fields are the kind's flags, and which ``options`` types; a run gives the options set
    away from their defaults to the spec, whose ``bound`` takes them
    (:class:`~shardwise.model.run_bound.RunBound`). ``applies_to`` says, in messages, which models the
    options are for (``remote models (openai:NAME, ...)``), ``one`` names one such model, and ``section_doc``
    describes the section (the form's and ``--help``'s text).
    """

    @property
    def name(self) -> str: ...

    @property
    def section(self) -> str | None: ...

    @property
    def options(self) -> type[BaseModel]: ...

    @property
    def section_doc(self) -> str: ...

    @property
    def applies_to(self) -> str: ...

    @property
    def one(self) -> str: ...

    def priced_as(self, model: str) -> tuple[str, str] | None:
        """For a model that runs elsewhere (an endpoint: no device of this host), priced by its tokens,
        the provider and model name the price table knows it by; None for a model run on this host."""
        ...

    def claims(self, model: str) -> bool:
        """Whether ``--model`` ``model`` is this kind's; cheap (no weights, no network, no import)."""
        ...

    def spec(self, model: str) -> ModelSpec:
        """The spec ``model`` names, with default options (a run binds its own)."""
        ...

    def chunk_rows(self, spec: ModelSpec) -> int:
        """The rows a chunk of this kind's ``spec`` holds when the run gives none."""
        ...

    def imports_code(self, model: str) -> bool:
        """Whether choosing ``model`` imports a module the operator must allow (see
        :func:`shardwise.models.check_deployment_model`)."""
        ...

    def check_options(self, model: str, options: BaseModel) -> None:
        """Refuse (a :class:`ConfigError`) options of this kind that ``model`` cannot use."""
        ...


@runtime_checkable
class Engine(Protocol):
    """A model kind that runs another kind's causal LMs (vLLM runs an ``hf`` directory's or a ``gguf``
    file's), chosen by the generation settings' ``engine`` and set by their ``engine_options``. A causal
    LM spec asks it instead of branching on its name."""

    @property
    def name(self) -> str: ...

    @property
    def reads_gguf(self) -> bool:
        """Whether it loads a GGUF file as it is (else it is given a directory converted from it)."""
        ...

    def check(self, model: str, settings: Any) -> None:
        """Refuse (a ConfigError naming the fix) ``settings``' engine options, or the engine not installed."""
        ...

    def require(self, model: str) -> None:
        """Refuse the engine when its package is not installed; cheap (imports nothing)."""
        ...

    def outputs(self) -> tuple[Any, ...]:
        """Output columns it adds to a generator's (:class:`~shardwise.model.OutputColumn`)."""
        ...

    def version_token(self, settings: Any) -> str:
        """What its options that change outputs add to a generator's version."""
        ...

    def load(self, spec: Any, device: Any) -> Any:
        """The loaded generator of causal LM ``spec`` on ``device`` (one that batches by itself)."""
        ...

    def prompt_counter(self, spec: Any) -> Any:
        """The prompts its generator would send, for a plan to count without building the engine."""
        ...


def engine_names() -> tuple[str, ...]:
    """The engines a causal LM may generate with: the default, then the installed engine kinds."""
    return (DEFAULT_ENGINE, *(kind.name for kind in model_kinds() if isinstance(kind, Engine)))


def engine_of(name: str) -> Engine | None:
    """The engine kind named ``name``; None for Shardwise's own loop (:data:`DEFAULT_ENGINE`)."""
    if name not in engine_names():
        raise ConfigError(
            f"engine must be one of {', '.join(engine_names())}; got {name!r} ({DEFAULT_ENGINE}: Shardwise's "
            "own loop, any device; vllm: the vLLM engine, pip install vllm)"
        )
    found = load_model_kinds().get(name)
    return found if isinstance(found, Engine) else None


class KindDefaults:
    """What most kinds answer alike, for a kind class to inherit: no options, run on this host (priced
    by device time), imports no code."""

    section: str | None = None
    options: type[BaseModel] = KindOptions
    section_doc: str = ""
    applies_to: str = ""
    one: str = ""

    def priced_as(self, model: str) -> tuple[str, str] | None:
        return None

    def imports_code(self, model: str) -> bool:
        return False

    def check_options(self, model: str, options: BaseModel) -> None:
        return None


def load_model_kinds() -> dict[str, ModelKind | ConfigError]:
    """Every registered kind by name, imported (cached), Shardwise's own first and then the plug-ins' by
    name; a kind that cannot be loaded maps to why."""
    return _KINDS.loaded()


def model_kinds() -> list[ModelKind]:
    """The kinds that loaded, in the order they are asked."""
    return _KINDS.usable()


def claiming(model: str) -> ModelKind | None:
    """The first kind that claims ``--model`` ``model``; None when none does."""
    return next((kind for kind in model_kinds() if kind.claims(model)), None)


def model_kind(name: str) -> ModelKind:
    """The kind registered as ``name``; one that is not registered, or cannot load, is a ConfigError."""
    return _KINDS.kind(name)


def option_sections() -> dict[str, ModelKind]:
    """The kinds that own an option section, by section name (kinds sharing one, such as the two
    endpoint kinds, give it once: the first's)."""
    sections: dict[str, ModelKind] = {}
    for kind in model_kinds():
        if kind.section is not None and kind.options.model_fields:
            sections.setdefault(kind.section, kind)
    return sections


def clear_cache() -> None:
    """Forget the loaded kinds, so that packages installed since are seen (tests, a long-lived process)."""
    _KINDS.clear()


def _not_a_kind(name: str, found: Any) -> str | None:
    if not isinstance(found, type) and isinstance(found, ModelKind) and found.name == name:
        return None
    return (
        f"must be a ModelKind object named {name!r} (name, section, options, section_doc, applies_to, one, "
        "priced_as, claims, spec, chunk_rows, imports_code, check_options), not a class or function; fix "
        "the entry point"
    )


_KINDS: KindRegistry[ModelKind] = KindRegistry(
    ENTRY_POINT_GROUP,
    "model kind",
    _not_a_kind,
    "model kind {name!r} is not registered; known kinds: {known} (install the package that registers it "
    f"in the entry-point group {ENTRY_POINT_GROUP!r})",
)
