"""The ``gguf`` model kind: ``--model FILE.gguf`` (or ``hf:FILE.gguf``), a causal language model in one
GGUF file, generating text (:mod:`.spec`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shardwise.model import ModelSpec
from shardwise.model.kinds import KindDefaults
from shardwise.pipeline.chunks import GENERATION_CHUNK_ROWS

__all__ = ["KIND", "GGUFKind", "is_gguf_name"]


def is_gguf_name(name: str) -> bool:
    """Whether ``--model`` names a GGUF file (by its suffix; the file need not exist yet)."""
    return name.removeprefix("hf:").lower().endswith(".gguf")


@dataclass(frozen=True)
class GGUFKind(KindDefaults):
    """A path ending in ``.gguf`` that is not a directory; its spec says if the file is missing."""

    name: str = "gguf"

    def claims(self, model: str) -> bool:
        return is_gguf_name(model) and not Path(model.removeprefix("hf:")).expanduser().is_dir()

    def spec(self, model: str) -> ModelSpec:
        from shardwise.models.gguf.spec import GGUFCausalSpec

        return GGUFCausalSpec(Path(model.removeprefix("hf:")).expanduser())

    def chunk_rows(self, spec: ModelSpec) -> int:
        return GENERATION_CHUNK_ROWS  # a generator commits sooner


KIND = GGUFKind()
