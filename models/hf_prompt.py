"""A text generator's item and batch: a prompt's token ids with its sampling seed, and prompts padded left.

The generator (:class:`models.hf_causal.HFGenerator`) makes them in
``prepare`` and ``collate``; the engine orders items by :attr:`Prompt.cost`
and moves batches to the device; the decoding loop
(:mod:`models.hf_decode`) reads them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

__all__ = ["Prompt", "PromptBatch", "row_seed"]


@dataclass(frozen=True, slots=True)
class Prompt:
    """A generator's item: the prompt's token ids, and the seed its row samples with."""

    ids: list[int]
    max_new_tokens: int
    seed: int
    truncated: bool = False

    @property
    def cost(self) -> int:
        """What its KV cache holds at most: the prompt and every new token."""
        return len(self.ids) + self.max_new_tokens


@dataclass(frozen=True, slots=True)
class PromptBatch:
    """A generator's batch: int64 ids and mask, rows by width, padded on the LEFT; a seed per row."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    seeds: torch.Tensor
    max_new_tokens: int

    @property
    def padded_cost(self) -> int:
        rows, width = self.input_ids.shape
        return int(rows * (width + self.max_new_tokens))

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.input_ids, self.attention_mask, self.seeds)

    def pin_memory(self) -> PromptBatch:
        return self if self.input_ids.is_pinned() else self.map(torch.Tensor.pin_memory)

    def to(self, device: torch.device, *, non_blocking: bool = False) -> PromptBatch:
        return self.map(lambda t: t.to(device, non_blocking=non_blocking))

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> PromptBatch:
        return PromptBatch(fn(self.input_ids), fn(self.attention_mask), fn(self.seeds), self.max_new_tokens)


def row_seed(seed: int, ids: Sequence[int]) -> int:
    """A row's sampling seed: from the run's seed and the prompt's tokens, so equal rows draw alike
    whatever batch or worker they land in."""
    digest = hashlib.sha256(f"{seed}\0{','.join(map(str, ids))}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1  # a non-negative int64
