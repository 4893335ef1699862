"""Test doubles at the model protocol boundary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from shardwise.model import Encoding, Model, ModelInputs, TextInput


class OOMAbove:
    """Wraps a real model and raises a CUDA-style out-of-memory error for batches over ``limit`` tokens."""

    def __init__(self, inner: Model, limit: int) -> None:
        self.inner = inner
        self.limit = limit
        self.name = inner.name
        self.version = inner.version
        self.max_length = inner.max_length
        self.pad_id = inner.pad_id
        self.device = inner.device
        self.outputs = inner.outputs
        self.calls: list[tuple[int, int]] = []

    def tokenize(self, texts: Sequence[TextInput]) -> list[Encoding]:
        return self.inner.tokenize(texts)

    def forward(self, inputs: ModelInputs) -> torch.Tensor:
        tokens = inputs.input_ids.numel()
        self.calls.append(tuple(inputs.input_ids.shape))  # type: ignore[arg-type]
        if tokens > self.limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory (simulated: {tokens} > {self.limit} tokens)")
        return self.inner.forward(inputs)

    def to_columns(self, outputs: torch.Tensor) -> Mapping[str, np.ndarray]:
        return self.inner.to_columns(outputs)
