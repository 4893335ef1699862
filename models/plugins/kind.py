"""The ``plugins`` model kind: a spec object an installed package registers in the entry-point group
``shardwise.models`` (chosen by its name), or one named ``package.module:attribute`` (:mod:`.specs`)."""

from __future__ import annotations

from dataclasses import dataclass

from shardwise.errors import ConfigError
from shardwise.model import ModelSpec
from shardwise.model.generation import Generative
from shardwise.model.kinds import KindDefaults
from shardwise.models.plugins.specs import entry_point_names, entry_point_spec, is_reference, reference_spec
from shardwise.pipeline.chunks import DEFAULT_CHUNK_ROWS, GENERATION_CHUNK_ROWS, IMAGE_CHUNK_ROWS

__all__ = ["KIND", "PluginKind"]


@dataclass(frozen=True)
class PluginKind(KindDefaults):
    """An installed plug-in's name, or a ``package.module:attribute`` reference (asked after every other
    built-in kind, so ``openai:gpt4`` stays a remote model)."""

    name: str = "plugins"

    def claims(self, model: str) -> bool:
        return model in entry_point_names() or is_reference(model)

    def spec(self, model: str) -> ModelSpec:
        found = entry_point_spec(model)
        if found is not None:
            return found
        if not is_reference(model):  # registered when claimed, gone since
            raise ConfigError(f"model {model!r} is no longer registered by an installed package")
        return reference_spec(model)

    def chunk_rows(self, spec: ModelSpec) -> int:
        """A plug-in whose rows are pictures (its spec's ``images``) holds fewer rows at once."""
        if isinstance(spec, Generative):
            return GENERATION_CHUNK_ROWS
        return IMAGE_CHUNK_ROWS if getattr(spec, "images", False) else DEFAULT_CHUNK_ROWS

    def imports_code(self, model: str) -> bool:
        """A reference imports its module; a registered name was allowed by whoever installed it."""
        return model not in entry_point_names()


KIND = PluginKind()
