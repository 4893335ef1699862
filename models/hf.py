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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from models.hf_files import (
    VERSIONED,
    check_layout,
    encode,
    load_tokenizer,
    max_length_of,
    pad_id,
    read_json,
    uses_segments,
)
from models.pooling import Pooling, pool
from shardwise.errors import ConfigError
from shardwise.hashing import hash_files
from shardwise.model import Encoding, ModelInfo, OutputColumn, TextInput

__all__ = ["HFEncoder", "HFEncoderSpec"]


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
        check_layout(root)
        config = read_json(root / "config.json")
        max_length = max_length_of(root, config)
        hidden = config.get("hidden_size")
        if not isinstance(hidden, int):
            raise ConfigError(
                f"model directory {str(root)!r}: config.json has no integer hidden_size ({hidden!r}); "
                "give an encoder saved with save_pretrained()"
            )
        outputs = (OutputColumn("embedding", "vector", hidden),)
        return ModelInfo(self.name, hash_files(root, VERSIONED), outputs, max_length, pairs=True)

    def load(self, device: torch.device) -> HFEncoder:
        return HFEncoder(self, device)


class HFEncoder:
    """A loaded Hugging Face encoder that outputs one pooled vector per row."""

    def __init__(self, spec: HFEncoderSpec, device: torch.device) -> None:
        root = spec.path
        info = spec.describe()
        try:
            import tokenizers  # noqa: F401  (checked here so the message names the extra)
            from transformers import AutoModel
        except ImportError as exc:
            raise ConfigError(
                f"model {spec.name!r} needs the transformers and tokenizers packages; "
                "install them with: pip install 'shardwise[hf]'"
            ) from exc
        config = read_json(root / "config.json")
        self.max_length = info.max_length
        self._tokenizer = load_tokenizer(root, self.max_length)
        self._segments = uses_segments(config)
        self.pad_id = pad_id(self._tokenizer, config)
        self._pooling, self._normalize = _pooling_of(root)
        self.name = spec.name
        self.device = device
        self.version = info.version
        self.outputs = info.outputs
        self._net = AutoModel.from_pretrained(root, local_files_only=True).eval().to(device)

    def tokenize(self, texts: Sequence[TextInput]) -> list[Encoding]:
        return encode(self._tokenizer, texts, self._segments)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
    ) -> torch.Tensor:
        net_inputs = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "token_type_ids": token_type_ids,
        }
        hidden = self._net(**net_inputs).last_hidden_state
        return pool(hidden, attention_mask, self._pooling, self._normalize)

    def to_columns(self, outputs: torch.Tensor) -> Mapping[str, np.ndarray]:
        return {"embedding": outputs.numpy()}


def _pooling_of(root: Path) -> tuple[Pooling, bool]:
    cfg = read_json(root / "1_Pooling" / "config.json")
    mode: Pooling = "mean"
    if cfg.get("pooling_mode_cls_token"):
        mode = "cls"
    elif cfg.get("pooling_mode_max_tokens"):
        mode = "max"
    modules = (root / "modules.json").read_text() if (root / "modules.json").is_file() else ""
    return mode, "Normalize" in modules
