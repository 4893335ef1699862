"""The contract between the engine and a model from the catalogue (``models/``).

The engine knows nothing about any particular architecture. A catalogue entry
is a :class:`ModelSpec`; loading it gives a :class:`Model` bound to one device.
:meth:`ModelSpec.describe` gives its :class:`ModelInfo` without loading the
weights onto a device, so a CPU-only flow process can plan a GPU run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import torch

__all__ = ["Encoding", "Model", "ModelInfo", "ModelInputs", "ModelSpec", "OutputColumn", "TextInput"]

TextInput = str | tuple[str, str]
"""One row's input to :meth:`Model.tokenize`: a text, or a ``(text, text_pair)`` pair.

Pairs feed two-text models such as cross-encoders; a run gives either texts
or pairs, never a mix, and only to a model whose :attr:`ModelInfo.pairs` is true.
"""


@dataclass(frozen=True, slots=True)
class Encoding:
    """Token ids of one text, special tokens included, already cut to the model's limit."""

    ids: list[int]
    truncated: bool
    type_ids: list[int] | None = None
    """Segment ids (BERT's ``token_type_ids``): 0 for the text, 1 for its pair; None when unused."""


@dataclass(frozen=True, slots=True)
class ModelInputs:
    """One padded batch, as :meth:`Model.forward` receives it: int64 tensors, rows by width.

    ``attention_mask`` is None when no row is padded; ``token_type_ids`` (the
    segment ids of text pairs) is None unless the encodings carried
    :attr:`Encoding.type_ids`. One object rather than three arguments, so that
    the engine's copy, split and calibration code, and every model, name the
    inputs once.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None = None
    token_type_ids: torch.Tensor | None = None

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors that are set, input ids first."""
        return tuple(t for t in (self.input_ids, self.attention_mask, self.token_type_ids) if t is not None)

    def to(self, device: torch.device, *, non_blocking: bool = False) -> ModelInputs:
        """The same batch on ``device``."""
        return self.map(lambda t: t.to(device, non_blocking=non_blocking))

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> ModelInputs:
        """Apply ``fn`` to every tensor that is set."""
        mask, types = self.attention_mask, self.token_type_ids
        return ModelInputs(
            fn(self.input_ids), None if mask is None else fn(mask), None if types is None else fn(types)
        )

    def narrow(self, rows: slice, width: int) -> ModelInputs:
        """Rows ``rows`` cut to their first ``width`` columns; no mask if nothing is left padded."""
        part = self.map(lambda t: t[rows, :width])
        if part.attention_mask is not None and bool(part.attention_mask.all()):
            return ModelInputs(part.input_ids, None, part.token_type_ids)
        return part


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
    pairs: bool = False
    """Whether the model scores ``(text, text_pair)`` inputs (``--text-pair-column``)."""


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

    def tokenize(self, texts: Sequence[TextInput]) -> list[Encoding]:
        """Encode texts (or pairs, where the model takes them), truncating each to :attr:`max_length`.

        A pair is truncated as a whole, longest member first, and its
        encodings carry :attr:`Encoding.type_ids` where the model uses them.
        """
        ...

    def forward(self, inputs: ModelInputs) -> torch.Tensor:
        """Score one padded batch (on :attr:`device`): a float tensor with one row per input row."""
        ...

    def to_columns(self, outputs: torch.Tensor) -> Mapping[str, np.ndarray]:
        """Turn a batch of CPU outputs into result columns, one entry per row."""
        ...


@runtime_checkable
class ModelSpec(Protocol):
    """A catalogue entry: a name, and how to load the model onto a device."""

    @property
    def name(self) -> str:
        """The name results record as ``model_name`` (a frozen dataclass field is fine)."""
        ...

    def describe(self) -> ModelInfo:
        """Name, version, outputs and max length, read without putting weights on a device."""
        ...

    def load(self, device: torch.device) -> Model:
        """Load weights onto ``device`` in eval mode."""
        ...
