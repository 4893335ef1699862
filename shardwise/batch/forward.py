"""Run the model on one batch, splitting the batch's items when the device runs out of memory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from shardwise.batch.batching import CostBudget
from shardwise.batch.device import to_host
from shardwise.errors import DeviceOutOfMemoryError
from shardwise.model import DeviceBatch, Item, Model
from shardwise.precision import Precision, autocast, for_precision

__all__ = ["Columns", "Forward"]

Columns = Mapping[str, np.ndarray]


class Forward:
    """Score collated batches with ``model``; on out-of-memory, halve the items and lower the budget.

    Call it inside ``torch.inference_mode()``. The pass runs under autocast in
    ``precision`` (bf16 or fp16; nothing for fp32), on a CPU as on CUDA; in
    int8 the model's int8 copy runs instead (:func:`~shardwise.precision.for_precision`).
    Outputs come back to the CPU (floats as float32) one batch at a time, so
    device memory never accumulates results, and become the model's result
    columns there. Autocast adds no host synchronisation: it only picks
    kernels and casts on the device's stream.
    """

    def __init__(self, model: Model, budget: CostBudget, pad_to_multiple: int, precision: Precision) -> None:
        self.model = model
        self.budget = budget
        self.pad_to_multiple = pad_to_multiple
        self.precision = precision
        self._computes = for_precision(model, precision)
        self.oom_splits = 0

    def __call__(self, items: Sequence[Item], batch: DeviceBatch) -> Columns:
        """The result columns of ``batch`` (``items`` collated, on the device), one entry per item."""
        try:
            with autocast(self.model.device, self.precision):
                out = self._computes.run(batch)
            return self.model.to_columns(to_host(out))
        except torch.OutOfMemoryError as exc:
            if len(items) == 1:
                raise DeviceOutOfMemoryError(
                    f"device {self.model.device} ran out of memory on a single row of cost "
                    f"{items[0].cost} (tokens, for text); free device memory, use a smaller model or a "
                    "shorter max length, or run on a device with more memory"
                ) from exc
        # Split outside the except block: the live traceback would otherwise
        # keep the failed pass's activations allocated during the retries.
        self.oom_splits += 1
        self.budget.lower(batch.padded_cost // 2)
        if self.model.device.type == "cuda":
            torch.cuda.empty_cache()
        middle = len(items) // 2
        return _concat([self._again(items[:middle]), self._again(items[middle:])])

    def _again(self, items: Sequence[Item]) -> Columns:
        """Score half a batch: the model collates it again, so it pads only to its own largest item."""
        batch = self.model.collate(items, self.pad_to_multiple).to(self.model.device)
        return self(items, batch)


def _concat(parts: Sequence[Columns]) -> Columns:
    """The columns of consecutive parts of a batch, joined in order."""
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
