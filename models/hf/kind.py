"""The ``hf`` model kind: a local Hugging Face model directory (or ``hf:/path``), and the built-in names
``tiny`` and ``minilm`` (:data:`CATALOGUE`). Which spec a directory loads as, its ``config.json`` says
(:mod:`.directory`)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from shardwise.model import ModelSpec
from shardwise.model.generation import Generative
from shardwise.model.kinds import KindDefaults
from shardwise.models.gguf.kind import is_gguf_name
from shardwise.pipeline.chunks import DEFAULT_CHUNK_ROWS, GENERATION_CHUNK_ROWS, IMAGE_CHUNK_ROWS

__all__ = ["CATALOGUE", "KIND", "HFKind"]


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


@dataclass(frozen=True)
class HFKind(KindDefaults):
    """A catalogue name, or a directory (``hf:`` forces one: its spec says what is wrong with the path)."""

    name: str = "hf"

    def claims(self, model: str) -> bool:
        if model in CATALOGUE:
            return True
        path = Path(model.removeprefix("hf:")).expanduser()
        return path.is_dir() or (model.startswith("hf:") and not is_gguf_name(model))

    def spec(self, model: str) -> ModelSpec:
        if model in CATALOGUE:
            return CATALOGUE[model]
        from shardwise.models.hf.directory import directory_spec

        return directory_spec(Path(model.removeprefix("hf:")).expanduser())

    def chunk_rows(self, spec: ModelSpec) -> int:
        """A generator commits sooner; an image model holds fewer rows at once (pictures are large)."""
        if isinstance(spec, Generative):
            return GENERATION_CHUNK_ROWS
        return IMAGE_CHUNK_ROWS if getattr(spec, "images", False) else DEFAULT_CHUNK_ROWS


KIND = HFKind()
