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

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["joinable", "keep_rows", "stack", "stackable", "trim"]


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


def stackable(net: Any) -> bool:
    """Whether the caches ``net`` makes can take rows from other caches: every layer its config asks
    for a plain ``DynamicLayer`` (known before any pass, so prompts can be run in several passes)."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer

        layers = DynamicCache(config=net.config).layers
    except Exception:  # a transformers without per-layer caches, or a config it cannot read
        return False
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def stack(caches: Sequence[Any], masks: Sequence[torch.Tensor]) -> torch.Tensor:
    """Append the rows of ``caches[1:]`` to ``caches[0]`` (in place), each left-padded to the longest;
    gives the stacked mask. Each layer is copied once, into a tensor of the stacked size."""
    width = max(mask.shape[1] for mask in masks)
    for layers in zip(*(cache.layers for cache in caches), strict=True):
        layers[0].keys = _stacked([layer.keys for layer in layers], width)
        layers[0].values = _stacked([layer.values for layer in layers], width)
    return torch.cat([F.pad(mask, (width - mask.shape[1], 0)) for mask in masks])


def trim(cache: Any, mask: torch.Tensor) -> torch.Tensor:
    """Cut the leading positions no row attends to any more (rows that held them left); gives the mask."""
    used = mask.any(dim=0).nonzero()
    start = int(used[0]) if len(used) else mask.shape[1]
    if start == 0:
        return mask
    for layer in cache.layers:
        layer.keys, layer.values = layer.keys[..., start:, :], layer.values[..., start:, :]
    return mask[:, start:]


def _stacked(states: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """``states`` (each ``[rows, heads, positions, dim]``) one under another, right-aligned in
    ``width`` positions, zeros in front."""
    _, heads, _, dim = states[0].shape
    out = states[0].new_zeros(sum(s.shape[0] for s in states), heads, width, dim)
    start = 0
    for part in states:
        out[start : start + part.shape[0], :, width - part.shape[2] :] = part
        start += part.shape[0]
    return out
