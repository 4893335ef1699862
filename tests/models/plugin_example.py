"""A Shardwise model plug-in: a local Hugging Face encoder, CLS-pooled and L2-normalised.

Run it with ``--model plugin_example:spec``. The module must be importable
wherever the model runs, in the flow's process and on every worker: put its
folder on PYTHONPATH there, or ship it in an installed package. ENCODER_DIR
names a directory saved with save_pretrained(), with the tokenizer's
tokenizer.json beside the weights.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from transformers import AutoModel

from shardwise.batch.collate import collate_encodings
from shardwise.hashing import hash_files
from shardwise.model import TEXT, Encoding, ModelInfo, ModelInputs, OutputColumn
from shardwise.model.text import coerce_text

FILES = ("config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json")
"""The files that decide the output; the version is a hash of their bytes."""


class ClsEncoderSpec:
    """What planning needs, without weights on a device (describe), and how to load them (load)."""

    def __init__(self, root: Path, name: str = "cls-encoder") -> None:
        self.root = root
        self.name = name

    def describe(self) -> ModelInfo:
        config = json.loads((self.root / "config.json").read_text())
        version = hash_files(self.root, FILES)  # a content hash: never a timestamp or a random id
        outputs = (OutputColumn("embedding", "vector", config["hidden_size"]),)
        max_length = config["max_position_embeddings"]
        return ModelInfo(self.name, version, outputs, max_length, inputs=TEXT)  # it scores texts

    def load(self, device: torch.device) -> ClsEncoder:
        return ClsEncoder(self, device)


class ClsEncoder:
    """The loaded model: prepare a row, collate a batch, run it, name the result columns."""

    def __init__(self, spec: ClsEncoderSpec, device: torch.device) -> None:
        info = spec.describe()
        self.name, self.version, self.outputs = info.name, info.version, info.outputs
        self.max_length, self.device = info.max_length, device
        self.tokenizer = Tokenizer.from_file(str(spec.root / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_length)
        self.tokenizer.no_padding()  # collate pads each batch to its own longest row
        self.pad_id = self.tokenizer.token_to_id("[PAD]") or 0
        self.net = AutoModel.from_pretrained(spec.root, local_files_only=True).eval().to(device)

    def prepare(self, value: object) -> Encoding:
        """On the CPU, ahead of the device: one row's text as token ids; its cost is their count.

        coerce_text raises InputError for a null, empty or non-text value: that row becomes a dead letter.
        """
        encoded = self.tokenizer.encode(coerce_text(value))
        return Encoding(encoded.ids, truncated=bool(encoded.overflowing))

    def collate(self, items: Sequence[Encoding], multiple: int = 1) -> ModelInputs:
        """Pad on the right to the batch's longest row (rounded up to ``multiple``), with a mask."""
        return collate_encodings(items, self.pad_id, multiple)

    def run(self, batch: ModelInputs) -> torch.Tensor:
        """On the device: one row per item."""
        hidden = self.net(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
        return F.normalize(hidden[:, 0], p=2, dim=1)  # the [CLS] token's vector, at unit length

    def to_columns(self, outputs: torch.Tensor) -> Mapping[str, np.ndarray]:
        """On the CPU, in float32: one array per output column."""
        return {"embedding": outputs.numpy()}


spec = ClsEncoderSpec(Path(os.environ.get("ENCODER_DIR", "~/models/cls-encoder")).expanduser())
"""What ``--model plugin_example:spec`` names: the spec object itself (a plug-in is never called)."""
