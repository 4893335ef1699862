"""Turn per-token hidden states into one vector per row."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

__all__ = ["Pooling", "pool"]

Pooling = Literal["mean", "cls", "max"]


def pool(hidden: torch.Tensor, mask: torch.Tensor | None, mode: Pooling, normalize: bool) -> torch.Tensor:
    """Pool ``hidden`` (batch, tokens, dim) over real tokens; ``mask`` None means no padding."""
    if mode == "cls":
        out = hidden[:, 0]
    elif mask is None:
        out = hidden.mean(dim=1) if mode == "mean" else hidden.max(dim=1).values
    else:
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        if mode == "mean":
            out = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        else:
            out = hidden.masked_fill(weights == 0, torch.finfo(hidden.dtype).min).max(dim=1).values
    return F.normalize(out, p=2, dim=1) if normalize else out
