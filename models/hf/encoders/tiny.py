"""``tiny``: a small transformer encoder built in code, for fast tests.

Weights come from a seeded generator, so every load, on every machine, gives
the same model and the same version hash. The tokenizer hashes lower-cased
words into a fixed vocabulary: no files, no downloads.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from shardwise.hashing import hash_state
from shardwise.model import TEXT, Encoding, ModelInfo, ModelInputs, OutputColumn, TextInput
from shardwise.model.text_model import TextModel
from shardwise.models.hf.encoders.pooling import pool

__all__ = ["TinyModel", "TinySpec"]

_WORD = re.compile(r"\w+|[^\w\s]")
_PAD, _CLS, _SEP = 0, 1, 2
_FIRST_WORD_ID = 3


@dataclass(frozen=True)
class TinySpec:
    """Shape of the tiny encoder. Change a field and you get a new model version."""

    name: str = "tiny"
    dim: int = 32
    layers: int = 2
    heads: int = 4
    vocab: int = 4096
    max_length: int = 128
    seed: int = 0

    def describe(self) -> ModelInfo:
        """Builds the seeded network on the CPU (it is tiny) to hash it."""
        _, version = _build(self)
        return ModelInfo(self.name, version, _outputs(self), self.max_length, pairs=True, inputs=TEXT)

    def load(self, device: torch.device) -> TinyModel:
        return TinyModel(self, device)


def _outputs(spec: TinySpec) -> tuple[OutputColumn, ...]:
    return (OutputColumn("embedding", "vector", spec.dim),)


def _build(spec: TinySpec) -> tuple[_Encoder, str]:
    """The seeded network and its version hash: the same on every load and every machine."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        net = _Encoder(spec)
    return net, hash_state(asdict(spec), net.state_dict())


class _Encoder(nn.Module):
    def __init__(self, spec: TinySpec) -> None:
        super().__init__()
        self.tokens = nn.Embedding(spec.vocab, spec.dim, padding_idx=_PAD)
        self.positions = nn.Embedding(spec.max_length, spec.dim)
        layer = nn.TransformerEncoderLayer(
            spec.dim, spec.heads, dim_feedforward=spec.dim * 4, dropout=0.0, batch_first=True
        )
        self.layers = nn.TransformerEncoder(layer, spec.layers, enable_nested_tensor=False)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)[None]
        padding = None if mask is None else mask == 0
        hidden: torch.Tensor = self.layers(x, src_key_padding_mask=padding)
        return hidden


class TinyModel(TextModel):
    """The loaded tiny encoder: a ``dim``-d, L2-normalised, mean-pooled sentence vector.

    Its items are :class:`Encoding` s (``prepare`` and ``collate`` come from
    :class:`TextModel`), its batches :class:`ModelInputs`.
    """

    def __init__(self, spec: TinySpec, device: torch.device) -> None:
        self.name = spec.name
        self.max_length = spec.max_length
        self.pad_id = _PAD
        self.device = device
        self.outputs = _outputs(spec)
        self._vocab = spec.vocab
        net, self.version = _build(spec)
        self._net = net.eval().to(device)

    def encode(self, text: TextInput) -> Encoding:
        """``[CLS] words [SEP]``, or ``[CLS] text [SEP] pair [SEP]`` cut longest member first."""
        room = self.max_length - 2
        if isinstance(text, str):
            ids = self._word_ids(text)
            return Encoding([_CLS, *ids[:room], _SEP], truncated=len(ids) > room)
        first, second = (self._word_ids(t) for t in text)
        keep_first, keep_second = _fit_pair(len(first), len(second), room - 1)
        kept = [_CLS, *first[:keep_first], _SEP, *second[:keep_second], _SEP]
        return Encoding(kept, truncated=keep_first + keep_second < len(first) + len(second))

    def _word_ids(self, text: str) -> list[int]:
        words = _WORD.findall(text.lower())
        return [_FIRST_WORD_ID + zlib.crc32(w.encode()) % (self._vocab - _FIRST_WORD_ID) for w in words]

    def run(self, batch: ModelInputs) -> torch.Tensor:
        """The tiny encoder has no segment embeddings: a pair is told apart by its ``[SEP]`` only."""
        mask = batch.attention_mask
        return pool(self._net(batch.input_ids, mask), mask, "mean", normalize=True)

    def to_columns(self, outputs: torch.Tensor) -> Mapping[str, np.ndarray]:
        return {"embedding": outputs.numpy()}


def _fit_pair(first: int, second: int, room: int) -> tuple[int, int]:
    """How many tokens of each member fit in ``room``, cutting the longer one first (``longest_first``)."""
    if first + second <= room:
        return first, second
    if min(first, second) <= room // 2:
        return (first, room - first) if first < second else (room - second, second)
    return room // 2, room - room // 2
