"""The model catalogue: names users can pass as ``--model``, and how each one loads.

``tiny`` (built in code, for tests), ``minilm`` (all-MiniLM-L6-v2), the path
of any local Hugging Face model directory or GGUF causal LM file (``.gguf``),
either optionally written ``hf:/path``, a remote model written ``openai:NAME``,
``anthropic:NAME`` or ``openai-embed:NAME`` (see :mod:`shardwise.models.endpoints`), a plug-in written
``package.module:attribute``, or the name an installed package registers in
the entry-point group ``shardwise.models`` (see :mod:`shardwise.models.plugins.specs`).
Runs started from a deployment take only the names that import no module the
worker's operator did not allow (:func:`check_deployment_model`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from shardwise.errors import ConfigError, UnknownModelError
from shardwise.lazy import lazy_exports
from shardwise.model import ModelSpec
from shardwise.models.endpoints import endpoint_spec, is_endpoint_name
from shardwise.models.plugins.specs import (
    ALLOW_MODULES_SETTING,
    ENTRY_POINT_GROUP,
    PluginSpec,
    entry_point_names,
    entry_point_spec,
    is_reference,
    module_allowed,
    reference_spec,
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


class _BuiltIns(Mapping[str, ModelSpec]):
    """The built-in specs by name: the names are known up front, each spec is made on first use (once)."""

    def __init__(self, classes: Mapping[str, tuple[str, str]]) -> None:
        self._classes = dict(classes)
        self._made: dict[str, ModelSpec] = {}

    def __getitem__(self, name: str) -> ModelSpec:
        if name not in self._made:
            module, attribute = self._classes[name]
            self._made[name] = getattr(importlib.import_module(module), attribute)()
        return self._made[name]

    def __contains__(self, name: object) -> bool:
        return name in self._classes  # Mapping's own would make the spec

    def __iter__(self) -> Iterator[str]:
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)


CATALOGUE: Mapping[str, ModelSpec] = _BuiltIns(
    {
        "minilm": ("shardwise.models.hf.encoders.minilm", "MiniLMSpec"),
        "tiny": ("shardwise.models.hf.encoders.tiny", "TinySpec"),
    }
)
"""The built-in models. Installed plug-ins are not here: they are looked up when asked for."""


def known_models() -> list[str]:
    """Every model name: the built-ins and the installed plug-ins' names, sorted; nothing is imported."""
    return sorted({*CATALOGUE, *entry_point_names()})


def get_spec(name: str) -> ModelSpec:
    """Look a model up by name, local directory or ``.gguf`` file path, or ``package.module:attribute``.

    In this order: a built-in name, a remote model (``openai:NAME``, ``anthropic:NAME``,
    ``openai-embed:NAME``, reached with default options: the run gives its own with the spec's
    ``configured``), an installed plug-in's name, a directory,
    a path ending in ``.gguf`` (whose :meth:`describe` says if the file is
    missing), a module reference. A built-in name always wins: an installed
    package that registers ``tiny`` or ``minilm`` is not reachable by that
    name (reach it by its ``package.module:attribute``). A plug-in is
    imported here, so a plug-in that cannot be found, imported or used raises
    a ConfigError now; a broken plug-in never affects the other names.
    """
    if name in CATALOGUE:
        return CATALOGUE[name]
    if is_endpoint_name(name):
        return endpoint_spec(name)
    plugin = entry_point_spec(name)
    if plugin is not None:
        return plugin
    from shardwise.models.gguf.spec import GGUFCausalSpec, is_gguf_name
    from shardwise.models.hf.directory import directory_spec

    path = Path(name.removeprefix("hf:")).expanduser()
    if is_gguf_name(name) and not path.is_dir():
        return GGUFCausalSpec(path)
    if name.startswith("hf:") or path.is_dir():
        return directory_spec(path)
    if is_reference(name):
        return reference_spec(name)
    raise UnknownModelError(
        f"model {name!r} is not in the catalogue and is not a local directory; known models: "
        f"{', '.join(known_models())}, or the path of a Hugging Face model directory or .gguf file, a remote "
        "model as openai:NAME, anthropic:NAME or openai-embed:NAME, or a "
        "plug-in's package.module:attribute (docs: how-to/models.md, Your own model)"
    )


def check_deployment_model(name: str, allowed_modules: str | None) -> None:
    """Refuse, for a run started from a deployment, a model that would import a module nobody allowed.

    Anyone who may start a deployment (the UI's form, the API) types the model
    name, and importing a module runs its code on the worker. Such runs take
    the built-in names, installed plug-ins' names, model directories and GGUF
    files (which load weights, never code); a ``package.module:attribute``
    only when the worker's operator lists its module in ``allowed_modules``
    (the setting :data:`ALLOW_MODULES_SETTING`). Nothing is imported to decide.
    """
    if name in CATALOGUE or is_endpoint_name(name) or name in entry_point_names() or not is_reference(name):
        return  # a remote model imports no module: its name picks a provider, its model is the server's
    if Path(name.removeprefix("hf:")).expanduser().is_dir():
        return
    module = name.split(":", 1)[0]
    if not module_allowed(module, allowed_modules):
        raise ConfigError(
            f"model {name!r} names a module to import, and runs started from a deployment (the UI, the API, "
            "a schedule, an event) take only built-in models, model directories and plug-ins registered "
            f"under the entry-point group {ENTRY_POINT_GROUP!r}; register it there, or let the worker import "
            f"it: export {ALLOW_MODULES_SETTING}={module} where the worker runs"
        )
