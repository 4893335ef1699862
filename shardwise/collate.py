"""Pad a batch of token id lists to its own longest row."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from shardwise.batching import padded_length
from shardwise.model import Encoding, ModelInputs

__all__ = ["Collated", "collate", "collate_encodings"]


@dataclass(frozen=True, slots=True)
class Collated:
    """A padded batch on the host, and how many of its tokens are real (not padding)."""

    inputs: ModelInputs
    real_tokens: int

    @property
    def padded_tokens(self) -> int:
        return int(self.inputs.input_ids.numel())


def collate(
    seqs: Sequence[Sequence[int]],
    pad_id: int,
    multiple: int = 1,
    pin_memory: bool = False,
    type_ids: Sequence[Sequence[int]] | None = None,
) -> Collated:
    """Pad ``seqs`` to the longest one (rounded up to ``multiple``) and build the mask.

    ``type_ids``, one list per row as long as its ids, is padded with 0 the
    same way. With ``pin_memory`` the tensors are written straight into
    page-locked memory, so the host-to-device copy can run asynchronously
    without an extra copy.
    """
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    width = padded_length(int(lengths.max()), multiple)
    ids = _padded(seqs, width, pad_id, pin_memory)
    segments = None if type_ids is None else _padded(type_ids, width, 0, pin_memory)
    real = int(lengths.sum())
    if real == ids.numel():
        return Collated(ModelInputs(ids, None, segments), real)
    mask = torch.empty((len(seqs), width), dtype=torch.int64, pin_memory=pin_memory)
    np.less(np.arange(width)[None, :], lengths[:, None], out=mask.numpy(), casting="unsafe")
    return Collated(ModelInputs(ids, mask, segments), real)


def collate_encodings(
    rows: Sequence[Encoding], pad_id: int, multiple: int = 1, pin_memory: bool = False
) -> Collated:
    """:func:`collate` of encodings; their segment ids go along when any row carries them."""
    segments = [e.type_ids or [0] * len(e.ids) for e in rows] if any(e.type_ids for e in rows) else None
    return collate([e.ids for e in rows], pad_id, multiple, pin_memory, segments)


def _padded(seqs: Sequence[Sequence[int]], width: int, fill: int, pin_memory: bool) -> torch.Tensor:
    out = torch.empty((len(seqs), width), dtype=torch.int64, pin_memory=pin_memory)
    view = out.numpy()
    view.fill(fill)
    for row, seq in enumerate(seqs):
        view[row, : len(seq)] = seq
    return out
