"""Run the model on one batch, splitting the batch when the device runs out of memory."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from shardwise.batching import TokenBudget, padded_length
from shardwise.errors import DeviceOutOfMemoryError
from shardwise.model import Model, ModelInputs
from shardwise.precision import Precision, autocast

__all__ = ["Forward"]


class Forward:
    """Score padded batches with ``model``; on out-of-memory, halve the batch and lower the budget.

    Call it inside ``torch.inference_mode()``. The pass runs under autocast in
    ``precision`` (bf16 or fp16; nothing for fp32), on a CPU as on CUDA.
    Outputs come back as float32 on the CPU, one batch at a time, so device
    memory never accumulates results. Autocast adds no host synchronisation:
    it only picks kernels and casts on the device's stream.
    """

    def __init__(self, model: Model, budget: TokenBudget, pad_to_multiple: int, precision: Precision) -> None:
        self.model = model
        self.budget = budget
        self.pad_to_multiple = pad_to_multiple
        self.precision = precision
        self.oom_splits = 0

    def __call__(self, inputs: ModelInputs) -> torch.Tensor:
        try:
            with autocast(self.model.device, self.precision):
                out = self.model.forward(inputs)
            # .cpu() waits for the forward pass to finish; that wait is the one
            # synchronisation point per batch, and it is what tells the
            # prefetcher the batch's device memory may be reused.
            return out.float().cpu()
        except torch.OutOfMemoryError as exc:
            if inputs.rows == 1:
                raise DeviceOutOfMemoryError(
                    f"device {self.model.device} ran out of memory on a single row of "
                    f"{inputs.input_ids.shape[1]} tokens; free device memory, use a smaller model or a "
                    "shorter max length, or run on a device with more memory"
                ) from exc
        # Split outside the except block: the live traceback would otherwise
        # keep the failed pass's activations allocated during the retries.
        self.oom_splits += 1
        self.budget.lower(int(inputs.input_ids.numel()) // 2)
        if self.model.device.type == "cuda":
            torch.cuda.empty_cache()
        return torch.cat([self(half) for half in self._halves(inputs)])

    def _halves(self, inputs: ModelInputs) -> Iterator[ModelInputs]:
        """Split a batch in two, re-padding each half to its own longest row."""
        middle = inputs.rows // 2
        for rows in (slice(0, middle), slice(middle, None)):
            width = int(inputs.input_ids.shape[1])
            if inputs.attention_mask is not None:
                longest = int(inputs.attention_mask[rows].sum(dim=1).max())
                width = min(padded_length(longest, self.pad_to_multiple), width)
            yield inputs.narrow(rows, width)
