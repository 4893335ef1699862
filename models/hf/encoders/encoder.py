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

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from shardwise.errors import ConfigError
from shardwise.hashing import hash_files
from shardwise.model import TEXT, ModelInfo, ModelInputs, OutputColumn
from shardwise.models.hf.encoders.bert import load_bert, native_config
from shardwise.models.hf.encoders.pooling import Pooling, pool
from shardwise.models.hf.files import (
    VERSIONED,
    check_layout,
    max_length_of,
    read_json,
)
from shardwise.models.hf.loaded import HFLoaded

__all__ = ["HFEncoder", "HFEncoderSpec"]

_WIDTH_KEYS = ("hidden_size", "dim", "d_model", "n_embd")
"""Where a config.json gives the hidden width, by architecture family."""


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
        # The JSON names the width as its architecture does (BERT hidden_size, DistilBERT dim, ...).
        widths = [config.get(name) for name in _WIDTH_KEYS]
        hidden = next((w for w in widths if isinstance(w, int) and not isinstance(w, bool)), None)
        if hidden is None:
            raise ConfigError(
                f"model directory {str(root)!r}: config.json has no integer hidden_size (nor "
                f"{', '.join(_WIDTH_KEYS[1:])}); "
                "give an encoder saved with save_pretrained()"
            )
        outputs = (OutputColumn("embedding", "vector", hidden),)
        version = hash_files(root, VERSIONED)
        return ModelInfo(self.name, version, outputs, max_length, pairs=True, inputs=TEXT)

    def load(self, device: torch.device) -> HFEncoder:
        return HFEncoder(self, device)


class HFEncoder(HFLoaded):
    """A loaded Hugging Face encoder that outputs one pooled vector per row."""

    def __init__(self, spec: HFEncoderSpec, device: torch.device) -> None:
        super().__init__(spec.name, spec.describe(), spec.path, device)
        self._pooling, self._normalize = _pooling_of(spec.path)
        # A plain BERT encoder is built here without importing transformers (.bert); others, or
        # one whose files that builder does not take exactly, load through transformers' AutoModel.
        config = native_config(spec.path)
        native = load_bert(spec.path, config, device) if config is not None else None
        self.native = native is not None
        if native is not None:
            self._net: torch.nn.Module = native
        else:
            from transformers import AutoModel

            self._net = AutoModel.from_pretrained(spec.path, local_files_only=True).eval().to(device)

    def run(self, batch: ModelInputs) -> torch.Tensor:
        out = self._net(**self.net_inputs(batch))
        hidden = out if self.native else out.last_hidden_state
        return pool(hidden, batch.attention_mask, self._pooling, self._normalize)

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
