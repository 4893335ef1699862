"""What a loaded Hugging Face directory model shares, whatever its head: identity, tokenizer, inputs.

:class:`HFLoaded` holds the fields :meth:`describe` gave, the directory's
tokenizer with its pad id and segment-id rule (:mod:`models.hf.files`), which
give it ``prepare`` and ``collate`` (:class:`~shardwise.model.text_model.TextModel`),
and builds a transformers forward pass's keyword arguments. The encoder
(:mod:`models.hf.encoders.encoder`) and the classifier (:mod:`models.hf.encoders.classifier`) add their
network and their outputs.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from shardwise.errors import ConfigError
from shardwise.model import Encoding, ModelInfo, ModelInputs, TextInput
from shardwise.model.text_model import TextModel
from shardwise.models.hf.files import encode, load_tokenizer, pad_id, read_json, uses_segments

__all__ = ["HFLoaded", "require_transformers"]


def require_transformers(name: str) -> None:
    """Raise a :class:`ConfigError` naming the extra to install when transformers or tokenizers is missing.

    Found, not imported: a plain BERT encoder never imports transformers (:mod:`models.hf.encoders.bert`), and
    importing it costs seconds.
    """
    if any(importlib.util.find_spec(package) is None for package in ("tokenizers", "transformers")):
        raise ConfigError(
            f"model {name!r} needs the transformers and tokenizers packages; "
            "install them with: pip install 'shardwise[hf]'"
        )


class HFLoaded(TextModel):
    """A directory model's identity and tokenizer, as described by ``info``, on ``device``."""

    def __init__(self, name: str, info: ModelInfo, root: Path, device: torch.device) -> None:
        require_transformers(name)
        config = read_json(root / "config.json")
        self.name = name
        self.version = info.version
        self.outputs = info.outputs
        self.max_length = info.max_length
        self.device = device
        self._tokenizer = load_tokenizer(root, self.max_length)
        self._segments = uses_segments(config)
        self.pad_id = pad_id(self._tokenizer, config)

    def encode(self, text: TextInput) -> Encoding:
        return encode(self._tokenizer, text, self._segments)

    @staticmethod
    def net_inputs(inputs: ModelInputs) -> dict[str, torch.Tensor | None]:
        """A forward pass's arguments: segment ids only when given, since a model without segment
        embeddings (DistilBERT) takes no such argument."""
        args = {"input_ids": inputs.input_ids, "attention_mask": inputs.attention_mask}
        if inputs.token_type_ids is not None:
            args["token_type_ids"] = inputs.token_type_ids
        return args
