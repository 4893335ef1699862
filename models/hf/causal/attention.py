"""Grouped-query attention on a CPU that reads the shared key/value heads in place.

A model with grouped-query attention (SmolLM2, Llama 3, Qwen: fewer
key/value heads than query heads) shares each key/value head among several
query heads. transformers' SDPA attention repeats each key/value head to
the query heads' count (``repeat_kv``, a copy of the layer's whole cache)
whenever a mask is given, because CUDA's fast kernels refuse a masked
grouped call. The generator always gives a mask (its rows are left-padded),
so on a CPU every decode step copied every layer's cache three times over
(SmolLM2: 9 query heads, 3 key/value heads), more work than the attention
itself. torch's CPU kernel takes ``enable_gqa=True`` with a mask and reads
the shared heads in place: the same result (the heads' outputs are equal to
within float rounding), without the copies. Measured on two AVX512 cores,
one decode step's attention over 128 rows of 150 cached tokens: 8 ms
against 70 ms.

:func:`read_kv_in_place` switches a loaded CPU model to it; a model on
another device, one without grouped heads, or one whose attention is not
transformers' SDPA is left as it is.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

__all__ = ["IN_PLACE_GQA", "read_kv_in_place"]

IN_PLACE_GQA = "shardwise_cpu_gqa_sdpa"
"""The attention implementation's registered name."""


def _attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """SDPA with ``enable_gqa`` where a mask is given on a CPU; transformers' own SDPA otherwise."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    grouped = getattr(module, "num_key_value_groups", 1) > 1
    plain = kwargs.get("position_bias") is None and kwargs.get("cache") is None
    if grouped and plain and attention_mask is not None and query.device.type == "cpu":
        # With a mask, transformers' SDPA is not causal either: the mask says what each query sees.
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
        )
        return out.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(
        module,
        query,
        key,
        value,
        attention_mask,
        dropout=dropout,
        scaling=scaling,
        is_causal=is_causal,
        **kwargs,
    )


@functools.cache
def _registered() -> str:
    """Register the attention, with SDPA's mask, once per process."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(IN_PLACE_GQA, _attention)
    AttentionMaskInterface.register(IN_PLACE_GQA, sdpa_mask)
    return IN_PLACE_GQA


def read_kv_in_place(net: Any, device: torch.device) -> bool:
    """Switch ``net`` (a loaded causal LM on ``device``) to :data:`IN_PLACE_GQA` where it applies: a CPU,
    grouped key/value heads, transformers' SDPA attention. Whether it was switched."""
    config = net.config
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if device.type != "cpu" or not heads or kv_heads >= heads or config._attn_implementation != "sdpa":
        return False
    net.set_attn_implementation(_registered())
    return bool(config._attn_implementation == IN_PLACE_GQA)
