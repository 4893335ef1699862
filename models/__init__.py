"""The model catalogue: names users can pass as ``--model``, and how each one loads.

Each ``--model`` value belongs to the model kind that claims it (:mod:`shardwise.model.kinds`, the
entry-point group ``shardwise.model_kinds``): ``hf`` (``tiny``, ``minilm``, a local Hugging Face model
directory, optionally written ``hf:/path``: :mod:`.hf`), ``gguf`` (a ``.gguf`` causal LM file:
:mod:`.gguf`), ``openai`` and ``anthropic`` (``openai:NAME``, ``openai-embed:NAME``, ``anthropic:NAME``:
:mod:`.endpoints`), ``plugins`` (an installed plug-in's name, or ``package.module:attribute``:
:mod:`.plugins`), ``vllm`` (an engine for the causal LMs: :mod:`.vllm`), or an installed package's own kind.
Runs started from a deployment take only the names that import no module the worker's operator did not
allow (:func:`check_deployment_model`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardwise.errors import ConfigError, UnknownModelError
from shardwise.lazy import lazy_exports
from shardwise.model import ModelSpec
from shardwise.model.kinds import claiming
from shardwise.models.hf.kind import CATALOGUE
from shardwise.models.plugins.specs import (
    ALLOW_MODULES_SETTING,
    ENTRY_POINT_GROUP,
    PluginSpec,
    entry_point_names,
    module_allowed,
)

if TYPE_CHECKING:
    from shardwise.models.gguf.spec import GGUFCausalSpec
    from shardwise.models.hf.encoders.classifier import HFClassifierSpec
    from shardwise.models.hf.encoders.encoder import HFEncoderSpec
    from shardwise.models.hf.encoders.minilm import MiniLMSpec
    from shardwise.models.hf.encoders.tiny import TinySpec
    from shardwise.models.hf.images.image import HFClipSpec, HFImageClassifierSpec, HFImageEncoderSpec

__all__ = [
    "ALLOW_MODULES_SETTING",
    "CATALOGUE",
    "ENTRY_POINT_GROUP",
    "GGUFCausalSpec",
    "HFClassifierSpec",
    "HFClipSpec",
    "HFEncoderSpec",
    "HFImageClassifierSpec",
    "HFImageEncoderSpec",
    "MiniLMSpec",
    "PluginSpec",
    "TinySpec",
    "check_deployment_model",
    "get_spec",
    "known_models",
]

# The spec classes load on first use, as the built-in specs do: their modules import torch, and the
# CLI lists the model names (known_models) to print --help without it.
__getattr__ = lazy_exports(
    __name__,
    {
        ".hf.encoders.encoder": ("HFEncoderSpec",),
        ".hf.encoders.classifier": ("HFClassifierSpec",),
        ".gguf.spec": ("GGUFCausalSpec",),
        ".hf.images.image": ("HFClipSpec", "HFImageClassifierSpec", "HFImageEncoderSpec"),
        ".hf.encoders.minilm": ("MiniLMSpec",),
        ".hf.encoders.tiny": ("TinySpec",),
    },
)


def known_models() -> list[str]:
    """Every model name: the built-ins and the installed plug-ins' names, sorted; nothing is imported."""
    return sorted({*CATALOGUE, *entry_point_names()})


def get_spec(name: str) -> ModelSpec:
    """The spec of ``--model`` ``name``, made by the model kind that claims it (see the module's docstring).

    A remote model comes with default options: the run gives its own (the spec's ``bound``). A built-in
    name always wins: an installed package that registers ``tiny`` or ``minilm`` is not reachable by that
    name (reach it by its ``package.module:attribute``). A plug-in is imported here, so a plug-in that
    cannot be found, imported or used raises a ConfigError now; a broken plug-in never affects the other
    names.
    """
    kind = claiming(name)
    if kind is None:
        raise UnknownModelError(
            f"model {name!r} is not in the catalogue and is not a local directory; known models: "
            f"{', '.join(known_models())}, or the path of a Hugging Face model directory or .gguf file, a "
            "remote model as openai:NAME, anthropic:NAME or openai-embed:NAME, or a "
            "plug-in's package.module:attribute (docs: how-to/models.md, Your own model)"
        )
    return kind.spec(name)


def check_deployment_model(name: str, allowed_modules: str | None) -> None:
    """Refuse, for a run started from a deployment, a model that would import a module nobody allowed.

    Anyone who may start a deployment (the UI's form, the API) types the model
    name, and importing a module runs its code on the worker. Such runs take
    the built-in names, installed plug-ins' names, model directories, GGUF
    files (which load weights, never code) and remote models; a
    ``package.module:attribute`` only when the worker's operator lists its module in ``allowed_modules``
    (the setting :data:`ALLOW_MODULES_SETTING`). Nothing is imported to decide.
    """
    kind = claiming(name)
    if kind is None or not kind.imports_code(name):
        return
    module = name.split(":", 1)[0]
    if not module_allowed(module, allowed_modules):
        raise ConfigError(
            f"model {name!r} names a module to import, and runs started from a deployment (the UI, the API, "
            "a schedule, an event) take only built-in models, model directories and plug-ins registered "
            f"under the entry-point group {ENTRY_POINT_GROUP!r}; register it there, or let the worker import "
            f"it: export {ALLOW_MODULES_SETTING}={module} where the worker runs"
        )
