"""Surgery on a batch's KV cache for continuous batching: rows leave it, rows join it, dead columns go.

The cache is transformers' ``DynamicCache``: per layer, key and value tensors
``[rows, heads, positions, head_dim]``, all rows left-padded to one length, the
attention mask saying which positions are real. Rows joining mid-decode are
prefilled on their own and their cache is left-padded (or the batch's is) to
the longer of the two before the two are stacked; masked positions are never
attended to, and positions are passed explicitly, so a row computes what it
would alone. Joining needs layers that are plain ``DynamicLayer`` s (no sliding
window, no quantised or static layers): :func:`joinable` says whether a
cache's are; without it the decoder lets rows leave but admits no new ones
until the batch is empty.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["joinable", "keep_rows", "stack", "trim"]


def joinable(cache: Any) -> bool:
    """Whether rows can be stacked into ``cache`` and columns cut: every layer a plain ``DynamicLayer``."""
    layers = getattr(cache, "layers", None)
    if not layers:
        return False
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        return False
    return all(type(layer) is DynamicLayer and layer.keys is not None for layer in layers)


def keep_rows(cache: Any, rows: torch.Tensor) -> None:
    """Keep only ``rows`` (indices) of ``cache``, in that order."""
    cache.batch_select_indices(rows)


def stack(cache: Any, mask: torch.Tensor, joined: Any, joined_mask: torch.Tensor) -> torch.Tensor:
    """Append ``joined``'s rows to ``cache`` (in place), the shorter left-padded; gives the stacked mask."""
    have, come = mask.shape[1], joined_mask.shape[1]
    for mine, theirs in zip(cache.layers, joined.layers, strict=True):
        keys, values = _left_pad(mine.keys, come - have), _left_pad(mine.values, come - have)
        new_keys, new_values = _left_pad(theirs.keys, have - come), _left_pad(theirs.values, have - come)
        mine.keys, mine.values = torch.cat([keys, new_keys]), torch.cat([values, new_values])
    return torch.cat([F.pad(mask, (max(0, come - have), 0)), F.pad(joined_mask, (max(0, have - come), 0))])


def trim(cache: Any, mask: torch.Tensor) -> torch.Tensor:
    """Cut the leading positions no row attends to any more (rows that held them left); gives the mask."""
    used = mask.any(dim=0).nonzero()
    start = int(used[0]) if len(used) else mask.shape[1]
    if start == 0:
        return mask
    for layer in cache.layers:
        layer.keys, layer.values = layer.keys[..., start:, :], layer.values[..., start:, :]
    return mask[:, start:]


def _left_pad(states: torch.Tensor, width: int) -> torch.Tensor:
    """``states`` (``[rows, heads, positions, dim]``) with ``width`` zero positions in front, if > 0."""
    return F.pad(states, (0, 0, width, 0)) if width > 0 else states
