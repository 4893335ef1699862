"""A text model's collate: pad token id lists to the batch's own longest row, on the right."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from shardwise.batch.batching import padded_length
from shardwise.model import Encoding, ModelInputs

__all__ = ["collate", "collate_encodings"]


def collate(
    seqs: Sequence[Sequence[int]],
    pad_id: int,
    multiple: int = 1,
    type_ids: Sequence[Sequence[int]] | None = None,
) -> ModelInputs:
    """Pad ``seqs`` to the longest one (rounded up to ``multiple``) and build the mask.

    ``type_ids``, one list per row as long as its ids, is padded with 0 the
    same way. No mask is made when no row is padded.
    """
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    width = padded_length(int(lengths.max()), multiple)
    ids = _padded(seqs, width, pad_id)
    segments = None if type_ids is None else _padded(type_ids, width, 0)
    if int(lengths.sum()) == ids.numel():
        return ModelInputs(ids, None, segments)
    mask = torch.empty((len(seqs), width), dtype=torch.int64)
    np.less(np.arange(width)[None, :], lengths[:, None], out=mask.numpy(), casting="unsafe")
    return ModelInputs(ids, mask, segments)


def collate_encodings(rows: Sequence[Encoding], pad_id: int, multiple: int = 1) -> ModelInputs:
    """:func:`collate` of encodings; their segment ids go along when any row carries them."""
    segments = [e.type_ids or [0] * len(e.ids) for e in rows] if any(e.type_ids for e in rows) else None
    return collate([e.ids for e in rows], pad_id, multiple, segments)


def _padded(seqs: Sequence[Sequence[int]], width: int, fill: int) -> torch.Tensor:
    out = torch.empty((len(seqs), width), dtype=torch.int64)
    view = out.numpy()
    view.fill(fill)
    for row, seq in enumerate(seqs):
        view[row, : len(seq)] = seq
    return out
