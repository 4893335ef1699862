"""Any local Hugging Face sequence-classification directory (a classifier or a cross-encoder), by path.

The directory needs what an encoder directory needs (``config.json``, weights,
a fast-tokenizer ``tokenizer.json``), and its ``config.json`` must name a
``…ForSequenceClassification`` architecture. What the head's logits become
(``label``/``score``/``probabilities``, ``labels``/``probabilities`` or
``score``) is decided in :mod:`models.hf.heads`. Rows may be single texts or
``(text, text_pair)`` pairs, as a cross-encoder scores them.

The version is a SHA-256 over the same files as an encoder's, plus
``config_sentence_transformers.json`` (it may name the score's activation),
tagged with the head kind so the same files read as an encoder never share a
version. A multi-label head's threshold is part of how outputs are made, so
a threshold other than 0.5 is appended: ``<hash>+threshold=0.3``. A path
given as ``--model`` always loads with 0.5; another threshold takes a one-line
plug-in (:mod:`models.plugins.specs`), for example a module ``my_models.py`` holding
``topics = HFClassifierSpec("/models/topics", threshold=0.3)``, run with
``--model my_models:topics``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from shardwise.errors import ConfigError
from shardwise.hashing import hash_files
from shardwise.model import TEXT, ModelInfo, ModelInputs
from shardwise.models.hf.files import (
    VERSIONED,
    check_layout,
    max_length_of,
    read_json,
)
from shardwise.models.hf.heads import DEFAULT_THRESHOLD, Head, is_classifier, read_head
from shardwise.models.hf.loaded import HFLoaded

__all__ = ["HFClassifier", "HFClassifierSpec"]

_ST_CONFIG = "config_sentence_transformers.json"
_HEAD_TAG = "sequence-classification"


@dataclass(frozen=True)
class HFClassifierSpec:
    """A local sequence-classification directory. ``name`` defaults to ``hf:<path>``.

    ``threshold`` is the probability at which a multi-label head gives a label.
    """

    path: Path
    name: str = ""
    threshold: float = DEFAULT_THRESHOLD

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path).expanduser().resolve())
        if not self.name:
            object.__setattr__(self, "name", f"hf:{self.path}")
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, int | float):
            raise ConfigError(f"threshold must be a number between 0 and 1; got {self.threshold!r}")
        object.__setattr__(self, "threshold", float(self.threshold))
        if not (math.isfinite(self.threshold) and 0.0 < self.threshold < 1.0):
            raise ConfigError(
                f"threshold must lie strictly between 0 and 1; got {self.threshold!r} "
                f"(the default is {DEFAULT_THRESHOLD})"
            )

    def describe(self) -> ModelInfo:
        """Read from the directory's JSON files and a hash of its files; no weights are loaded."""
        config, head = self._head()
        return ModelInfo(
            self.name,
            self._version(head),
            head.outputs(),
            max_length_of(self.path, config),
            pairs=True,
            inputs=TEXT,
        )

    def load(self, device: torch.device) -> HFClassifier:
        return HFClassifier(self, device)

    def head(self) -> Head:
        """The classification head ``config.json`` describes."""
        return self._head()[1]

    def _head(self) -> tuple[dict[str, object], Head]:
        root = self.path
        check_layout(root)
        config = read_json(root / "config.json")
        if not is_classifier(config):
            raise ConfigError(
                f"model directory {str(root)!r}: config.json names architectures "
                f"{config.get('architectures')!r}, not a ...ForSequenceClassification head; give a "
                "fine-tuned classifier or cross-encoder directory, or load this one as an encoder"
            )
        head = read_head(config, read_json(root / _ST_CONFIG), str(root), self.threshold)
        if head.kind != "multi_label" and self.threshold != DEFAULT_THRESHOLD:
            raise ConfigError(
                f"threshold {self.threshold!r} applies to multi-label heads only; the head in "
                f"{str(root)!r} is {head.kind.replace('_', '-')}. Leave threshold at its default"
            )
        return config, head

    def _version(self, head: Head) -> str:
        files = hash_files(self.path, (*VERSIONED, _ST_CONFIG))
        version = hashlib.sha256(f"{_HEAD_TAG}\0{files}".encode()).hexdigest()
        if self.threshold != DEFAULT_THRESHOLD:
            version += f"+threshold={self.threshold!r}"
        return version


class HFClassifier(HFLoaded):
    """A loaded sequence-classification model: :meth:`run` gives logits, :meth:`to_columns` the columns."""

    def __init__(self, spec: HFClassifierSpec, device: torch.device) -> None:
        super().__init__(spec.name, spec.describe(), spec.path, device)
        from transformers import AutoModelForSequenceClassification

        root = spec.path
        self._head = spec.head()
        net, loading = AutoModelForSequenceClassification.from_pretrained(
            root, local_files_only=True, output_loading_info=True
        )
        if loading.get("missing_keys"):
            # transformers would fill them with random values: scores would be noise.
            missing = ", ".join(sorted(loading["missing_keys"]))
            raise ConfigError(
                f"model directory {str(root)!r}: the weights lack {missing}; the classification head was "
                "never trained or saved. Save the fine-tuned model with save_pretrained()"
            )
        self._net = net.eval().to(device)

    def run(self, batch: ModelInputs) -> torch.Tensor:
        logits: torch.Tensor = self._net(**self.net_inputs(batch)).logits
        return logits

    def to_columns(self, outputs: torch.Tensor) -> Mapping[str, np.ndarray]:
        return self._head.columns(outputs)
