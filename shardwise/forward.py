"""Run the model on one batch, splitting the batch when the device runs out of memory."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from shardwise.batching import TokenBudget, padded_length
from shardwise.errors import DeviceOutOfMemoryError
from shardwise.model import Model
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

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
    ) -> torch.Tensor:
        try:
            with autocast(self.model.device, self.precision):
                out = self.model.forward(input_ids, attention_mask, token_type_ids)
            # .cpu() waits for the forward pass to finish; that wait is the one
            # synchronisation point per batch, and it is what tells the
            # prefetcher the batch's device memory may be reused.
            return out.float().cpu()
        except torch.OutOfMemoryError as exc:
            if int(input_ids.shape[0]) == 1:
                raise DeviceOutOfMemoryError(
                    f"device {self.model.device} ran out of memory on a single row of "
                    f"{input_ids.shape[1]} tokens; free device memory, use a smaller model or a "
                    "shorter max length, or run on a device with more memory"
                ) from exc
        # Split outside the except block: the live traceback would otherwise
        # keep the failed pass's activations allocated during the retries.
        self.oom_splits += 1
        self.budget.lower(int(input_ids.numel()) // 2)
        if self.model.device.type == "cuda":
            torch.cuda.empty_cache()
        halves = self._halves(input_ids, attention_mask, token_type_ids)
        return torch.cat([self(ids, mask, types) for ids, mask, types in halves])

    def _halves(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]]:
        """Split a batch in two, re-padding each half to its own longest row."""
        middle = int(input_ids.shape[0]) // 2
        for part in (slice(0, middle), slice(middle, None)):
            ids, types = input_ids[part], None if token_type_ids is None else token_type_ids[part]
            if attention_mask is None:
                yield ids, None, types
                continue
            mask = attention_mask[part]
            width = padded_length(int(mask.sum(dim=1).max()), self.pad_to_multiple)
            width = min(width, int(ids.shape[1]))
            mask = mask[:, :width]
            yield (
                ids[:, :width],
                (None if bool(mask.all()) else mask),
                None if types is None else types[:, :width],
            )
