"""Any local Hugging Face encoder directory, loaded by path, scored as a sentence embedding.

The directory needs ``config.json``, weights (``model.safetensors`` or
``pytorch_model.bin``) and a fast-tokenizer ``tokenizer.json``. A
sentence-transformers layout is honoured: pooling mode from
``1_Pooling/config.json``, L2 normalisation when ``modules.json`` lists a
Normalize module, and ``max_seq_length`` from ``sentence_bert_config.json``.
Without those files the defaults are mean pooling, no normalisation, and the
tokenizer's ``model_max_length``. Loading never touches the network.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.pooling import Pooling, pool
from shardwise.errors import ConfigError
from shardwise.hashing import hash_files
from shardwise.model import Encoding, ModelInfo, OutputColumn

__all__ = ["HFEncoder", "HFEncoderSpec"]

_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
_VERSIONED = (
    "config.json",
    *_WEIGHTS,
    "tokenizer.json",
    "tokenizer_config.json",
    "modules.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
)


@dataclass(frozen=True)
class HFEncoderSpec:
    """A local encoder directory. ``name`` defaults to ``hf:<path>``."""

    path: Path
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path).expanduser().resolve())
        if not self.name:
            object.__setattr__(self, "name", f"hf:{self.path}")

    def describe(self) -> ModelInfo:
        """Read from the directory's JSON files and a hash of its files; no weights are loaded."""
        root = self.path
        _check_layout(root)
        config = _read_json(root / "config.json")
        st = _read_json(root / "sentence_bert_config.json")
        tok_cfg = _read_json(root / "tokenizer_config.json")
        limit = int(st.get("max_seq_length") or tok_cfg.get("model_max_length") or 512)
        max_length = min(limit, int(config.get("max_position_embeddings") or limit))
        hidden = config.get("hidden_size")
        if not isinstance(hidden, int):
            raise ConfigError(
                f"model directory {str(root)!r}: config.json has no integer hidden_size ({hidden!r}); "
                "give an encoder saved with save_pretrained()"
            )
        outputs = (OutputColumn("embedding", "vector", hidden),)
        return ModelInfo(self.name, hash_files(root, _VERSIONED), outputs, max_length)

    def load(self, device: torch.device) -> HFEncoder:
        return HFEncoder(self, device)


class HFEncoder:
    """A loaded Hugging Face encoder that outputs one pooled vector per row."""

    def __init__(self, spec: HFEncoderSpec, device: torch.device) -> None:
        root = spec.path
        info = spec.describe()
        try:
            from tokenizers import Tokenizer
            from transformers import AutoConfig, AutoModel
        except ImportError as exc:
            raise ConfigError(
                f"model {spec.name!r} needs the transformers and tokenizers packages; "
                "install them with: pip install 'shardwise[hf]'"
            ) from exc
        config = AutoConfig.from_pretrained(root, local_files_only=True)
        self.max_length = info.max_length
        self._tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        # The saved file may carry its own truncation and padding (MiniLM's
        # says 128); the engine pads per batch and the model limit rules.
        self._tokenizer.enable_truncation(self.max_length)
        self._tokenizer.no_padding()
        self.pad_id = _pad_id(self._tokenizer, config)
        self._pooling, self._normalize = _pooling_of(root)
        self.name = spec.name
        self.device = device
        self.version = info.version
        self.outputs = info.outputs
        self._net = AutoModel.from_pretrained(root, local_files_only=True).eval().to(device)

    def tokenize(self, texts: Sequence[str]) -> list[Encoding]:
        return [Encoding(e.ids, bool(e.overflowing)) for e in self._tokenizer.encode_batch(list(texts))]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        hidden = self._net(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return pool(hidden, attention_mask, self._pooling, self._normalize)

    def to_columns(self, outputs: torch.Tensor) -> Mapping[str, np.ndarray]:
        return {"embedding": outputs.numpy()}


def _check_layout(root: Path) -> None:
    if not root.is_dir():
        raise ConfigError(f"model path {str(root)!r} is not a directory; give a local encoder directory")
    present = sorted(p.name for p in root.iterdir())
    needed = ["config.json", "tokenizer.json"]
    missing = [n for n in needed if n not in present]
    if not any(w in present for w in _WEIGHTS):
        missing.append(" or ".join(_WEIGHTS))
    if missing:
        raise ConfigError(
            f"model directory {str(root)!r} lacks {', '.join(missing)}; it holds: "
            f"{', '.join(present) or 'nothing'}. Save the model with save_pretrained() and a fast tokenizer"
        )


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _pad_id(tokenizer: Any, config: Any) -> int:
    for token in ("[PAD]", "<pad>"):
        found = tokenizer.token_to_id(token)
        if found is not None:
            return int(found)
    return int(getattr(config, "pad_token_id", None) or 0)


def _pooling_of(root: Path) -> tuple[Pooling, bool]:
    cfg = _read_json(root / "1_Pooling" / "config.json")
    mode: Pooling = "mean"
    if cfg.get("pooling_mode_cls_token"):
        mode = "cls"
    elif cfg.get("pooling_mode_max_tokens"):
        mode = "max"
    modules = (root / "modules.json").read_text() if (root / "modules.json").is_file() else ""
    return mode, "Normalize" in modules
