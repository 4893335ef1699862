"""The model catalogue: names users can pass as ``--model``, and how each one loads.

``tiny`` (built in code, for tests), ``minilm`` (all-MiniLM-L6-v2), the path
of any local Hugging Face model directory (optionally written ``hf:/path``),
a plug-in written ``package.module:attribute``, or the name an installed
package registers in the entry-point group ``shardwise.models`` (see
:mod:`models.plugins`).
"""

from __future__ import annotations

from pathlib import Path

from shardwise.errors import UnknownModelError
from shardwise.model import ModelSpec
from shardwise.models.hf import HFEncoderSpec
from shardwise.models.hf_classifier import HFClassifierSpec
from shardwise.models.hf_directory import directory_spec
from shardwise.models.minilm import MiniLMSpec
from shardwise.models.plugins import (
    ENTRY_POINT_GROUP,
    PluginSpec,
    entry_point_names,
    entry_point_spec,
    is_reference,
    reference_spec,
)
from shardwise.models.tiny import TinySpec

__all__ = [
    "CATALOGUE",
    "ENTRY_POINT_GROUP",
    "HFClassifierSpec",
    "HFEncoderSpec",
    "MiniLMSpec",
    "PluginSpec",
    "TinySpec",
    "get_spec",
    "known_models",
]

CATALOGUE: dict[str, ModelSpec] = {"minilm": MiniLMSpec(), "tiny": TinySpec()}
"""The built-in models. Installed plug-ins are not here: they are looked up when asked for."""


def known_models() -> list[str]:
    """Every model name: the built-ins and the installed plug-ins' names, sorted; nothing is imported."""
    return sorted({*CATALOGUE, *entry_point_names()})


def get_spec(name: str) -> ModelSpec:
    """Look a model up by name, local directory path or ``package.module:attribute``.

    In this order: a built-in name, an installed plug-in's name, a directory,
    a module reference. A built-in name always wins: an installed package that
    registers ``tiny`` or ``minilm`` is not reachable by that name (reach it
    by its ``package.module:attribute``). A plug-in is imported here, so a
    plug-in that cannot be found, imported or used raises a ConfigError now;
    a broken plug-in never affects the other names.
    """
    if name in CATALOGUE:
        return CATALOGUE[name]
    plugin = entry_point_spec(name)
    if plugin is not None:
        return plugin
    path = Path(name.removeprefix("hf:")).expanduser()
    if name.startswith("hf:") or path.is_dir():
        return directory_spec(path)
    if is_reference(name):
        return reference_spec(name)
    raise UnknownModelError(
        f"model {name!r} is not in the catalogue and is not a local directory; known models: "
        f"{', '.join(known_models())}, or the path of a Hugging Face model directory, or a plug-in's "
        "package.module:attribute (README: Your own model)"
    )
