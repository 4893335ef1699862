"""The contract between the engine and a model from the catalogue (``models/``).

The engine knows nothing about any particular architecture. A catalogue entry
is a :class:`ModelSpec`; loading it gives a :class:`Model` bound to one device.
:meth:`ModelSpec.describe` gives its :class:`ModelInfo` without loading the
weights onto a device, so a CPU-only flow process can plan a GPU run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import torch

__all__ = ["Encoding", "Model", "ModelInfo", "ModelSpec", "OutputColumn"]


@dataclass(frozen=True, slots=True)
class Encoding:
    """Token ids of one text, special tokens included, already cut to the model's limit."""

    ids: list[int]
    truncated: bool


@dataclass(frozen=True, slots=True)
class OutputColumn:
    """One result column a model produces. ``dim`` is set for vectors only."""

    name: str
    kind: Literal["vector", "float", "int", "text"]
    dim: int | None = None


@dataclass(frozen=True)
class ModelInfo:
    """What planning needs of a model: who it is and what it writes; no weights, no device."""

    name: str
    version: str
    """The same content hash that :attr:`Model.version` gives once loaded."""
    outputs: tuple[OutputColumn, ...]
    max_length: int


@runtime_checkable
class Model(Protocol):
    """A model loaded onto one device, ready to score batches."""

    name: str
    version: str
    """Content hash of the weights, config and tokenizer: equal across loads of the same files."""
    max_length: int
    """Longest input in tokens, special tokens included; longer texts are truncated."""
    pad_id: int
    device: torch.device
    outputs: tuple[OutputColumn, ...]

    def tokenize(self, texts: Sequence[str]) -> list[Encoding]:
        """Encode texts, truncating each to :attr:`max_length`."""
        ...

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Score one padded batch. ``attention_mask`` is None when no row is padded."""
        ...

    def to_columns(self, outputs: torch.Tensor) -> Mapping[str, np.ndarray]:
        """Turn a batch of CPU outputs into result columns, one entry per row."""
        ...


@runtime_checkable
class ModelSpec(Protocol):
    """A catalogue entry: a name, and how to load the model onto a device."""

    name: str

    def describe(self) -> ModelInfo:
        """Name, version, outputs and max length, read without putting weights on a device."""
        ...

    def load(self, device: torch.device) -> Model:
        """Load weights onto ``device`` in eval mode."""
        ...
