"""BERT-family encoders in plain torch, loaded from their safetensors without importing transformers.

Importing transformers' BERT costs about 2 s of one core before a model can
load (``transformers.modeling_utils`` pulls in ``torch._dynamo`` and
``torch.distributed.tensor``, among others): on a short run, a third of the
command's time (``bench/whole.py``). Most sentence-embedding models are plain
BERT encoders (MiniLM, BGE, E5, GTE), so :func:`load_bert` builds their
network here, from ``config.json`` and ``model.safetensors``, as
transformers' ``BertModel`` computes it: word, segment and absolute position
embeddings and a LayerNorm; then per layer, attention through
``scaled_dot_product_attention`` with padding masked out, the output
projection, residual and LayerNorm, the feed-forward block with exact
(erf) GELU, residual and LayerNorm. The layers are ``nn.Linear`` and
``nn.LayerNorm``, so the cast copy for bf16 and the int8 copy treat it as
any network; the model version is the hash of the same files either way.

Anything else goes to transformers, decided from the files alone
(:func:`native_config`): another architecture, relative positions, another
activation, a decoder or cross-attention, weights not in one
``model.safetensors``, weights not all float32, or a tensor missing or left
over. ``tests/models/test_bert.py`` checks the outputs against transformers'.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["BertConfig", "BertEncoder", "load_bert", "native_config"]

_WEIGHTS = "model.safetensors"
_PREFIXES = ("bert.", "model.")
"""Prefixes a checkpoint of a BERT with a head (or wrapped) gives its encoder's tensors."""
_IGNORED = ("pooler.", "cls.", "classifier.", "embeddings.position_ids", "embeddings.token_type_ids")
"""Tensors the encoder's last hidden state does not use: heads, and index buffers it makes itself."""


@dataclass(frozen=True)
class BertConfig:
    """What the network needs from ``config.json``."""

    vocab_size: int
    hidden_size: int
    layers: int
    heads: int
    intermediate_size: int
    max_positions: int
    type_vocab_size: int
    eps: float


def native_config(root: Path) -> BertConfig | None:
    """The config of a plain BERT encoder in ``root`` that :func:`load_bert` computes as transformers
    does; None for anything else (transformers then loads it)."""
    try:
        config = json.loads((root / "config.json").read_text())
    except (OSError, ValueError):
        return None
    plain = (
        config.get("model_type") == "bert"
        and config.get("position_embedding_type", "absolute") == "absolute"
        and config.get("hidden_act", "gelu") == "gelu"
        and not config.get("is_decoder")
        and not config.get("add_cross_attention")
        and (root / _WEIGHTS).is_file()
        and not (root / f"{_WEIGHTS}.index.json").exists()
    )
    if not plain:
        return None
    try:
        found = BertConfig(
            vocab_size=int(config["vocab_size"]),
            hidden_size=int(config["hidden_size"]),
            layers=int(config["num_hidden_layers"]),
            heads=int(config["num_attention_heads"]),
            intermediate_size=int(config["intermediate_size"]),
            max_positions=int(config.get("max_position_embeddings", 512)),
            type_vocab_size=int(config.get("type_vocab_size", 2)),
            eps=float(config.get("layer_norm_eps", 1e-12)),
        )
    except (KeyError, TypeError, ValueError):
        return None
    return found if found.hidden_size % found.heads == 0 else None


class _Embeddings(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_positions, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.eps)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(x + self.position_embeddings(positions)[None])  # type: ignore[no-any-return]


class _Dense(nn.Module):
    """A projection, then LayerNorm over it plus the residual (BertSelfOutput, BertOutput)."""

    def __init__(self, width_in: int, width_out: int, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(width_in, width_out)
        self.LayerNorm = nn.LayerNorm(width_out, eps=eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)  # type: ignore[no-any-return]


class _SelfAttention(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)
        self.heads = c.heads
        self.scale = 1 / math.sqrt(c.hidden_size // c.heads)


class _Attention(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.self = _SelfAttention(c)
        self.output = _Dense(c.hidden_size, c.hidden_size, c.eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        s = self.self
        shape = (*x.shape[:-1], s.heads, -1)
        q, k, v = (p(x).view(shape).transpose(1, 2) for p in (s.query, s.key, s.value))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=s.scale)
        return self.output(out.transpose(1, 2).reshape(x.shape), x)  # type: ignore[no-any-return]


class _Intermediate(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)


class _Layer(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.attention = _Attention(c)
        self.intermediate = _Intermediate(c)
        self.output = _Dense(c.intermediate_size, c.hidden_size, c.eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = self.attention(x, mask)
        return self.output(F.gelu(self.intermediate.dense(x)), x)  # type: ignore[no-any-return]


class _Stack(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(_Layer(c) for _ in range(c.layers))


class BertEncoder(nn.Module):
    """BERT's encoder: ``forward`` gives the last hidden state (batch x tokens x width).

    Its modules are named as transformers' are, so the checkpoint's tensors load by name.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.embeddings = _Embeddings(config)
        self.encoder = _Stack(config)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = self.embeddings(input_ids, token_type_ids)
        # Keys of padding are masked out. A batch without padding comes without a mask (the engine's
        # collate leaves it out), and needs none.
        mask = None if attention_mask is None else attention_mask[:, None, None, :].bool()
        for layer in self.encoder.layer:
            x = layer(x, mask)
        return x


def load_bert(root: Path, config: BertConfig, device: torch.device) -> BertEncoder | None:
    """The encoder of ``root`` in eval mode on ``device``; None if its tensors are not exactly a plain
    BERT's in float32 (transformers then loads it)."""
    from safetensors.torch import load_file

    found = _encoder_tensors(load_file(str(root / _WEIGHTS)))
    with torch.device("meta"):
        net = BertEncoder(config)
    wanted = net.state_dict()
    if found.keys() != wanted.keys():
        return None
    for name, tensor in found.items():
        if tensor.dtype != torch.float32 or tensor.shape != wanted[name].shape:
            return None
    net.load_state_dict(found, assign=True)
    return net.eval().to(device)


def _encoder_tensors(tensors: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    out = {}
    for name, tensor in tensors.items():
        for prefix in _PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix) :]
                break
        if not name.startswith(_IGNORED):
            out[name] = tensor
    return out
