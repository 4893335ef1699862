"""Pad a batch of token id lists to its own longest row."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from shardwise.batching import padded_length

__all__ = ["Collated", "collate"]


@dataclass(frozen=True, slots=True)
class Collated:
    """A padded batch on the host. ``attention_mask`` is None when no row is padded."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    real_tokens: int

    @property
    def padded_tokens(self) -> int:
        return int(self.input_ids.numel())


def collate(
    seqs: Sequence[Sequence[int]], pad_id: int, multiple: int = 1, pin_memory: bool = False
) -> Collated:
    """Pad ``seqs`` to the longest one (rounded up to ``multiple``) and build the mask.

    With ``pin_memory`` the ids are written straight into page-locked memory,
    so the host-to-device copy can run asynchronously without an extra copy.
    """
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    width = padded_length(int(lengths.max()), multiple)
    ids = torch.empty((len(seqs), width), dtype=torch.int64, pin_memory=pin_memory)
    view = ids.numpy()
    view.fill(pad_id)
    for row, seq in enumerate(seqs):
        view[row, : len(seq)] = seq
    real = int(lengths.sum())
    if real == ids.numel():
        return Collated(ids, None, real)
    mask = torch.empty((len(seqs), width), dtype=torch.int64, pin_memory=pin_memory)
    np.less(np.arange(width)[None, :], lengths[:, None], out=mask.numpy(), casting="unsafe")
    return Collated(ids, mask, real)
