"""The half of the model contract every image model shares: pixel items, pixel batches, a decoding pool.

An image model's item is a :class:`PixelItem`, the picture as its processor
made it (resized, cropped, normalised): a float32 ``(channels, height,
width)`` tensor whose **cost is its pixel count**, so the engine's budget
(``max_tokens``) is a pixel budget for image models and cuts batches by it.
All items of one model have the same size once processed, so a batch is a
plain stack and nothing is padded.

:class:`DecodePool` is what ``prepare_many`` runs a window's rows in: a
bounded pool of threads, since Pillow releases the GIL while it decodes and
resizes. ``prepare_many`` runs on the engine's prefetch thread
(:mod:`shardwise.batch.prefetch`), so a window's decoding overlaps the forward
passes of the batches already queued: at most ``prefetch_depth`` batches of
the window before. A window's pictures are held processed, in float32 (about
600 KB each at 224x224), until its last batch is scored: a smaller
``window_rows`` bounds that memory.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from shardwise.errors import InputError, ShardwiseError
from shardwise.model import Item

__all__ = ["DEFAULT_DECODE_THREADS", "DecodePool", "PixelBatch", "PixelItem", "stack_pixels"]

DEFAULT_DECODE_THREADS = min(8, os.cpu_count() or 1)
"""Threads decoding images per loaded model: enough to keep a GPU fed, few enough to leave CPUs free."""


@dataclass(frozen=True, slots=True)
class PixelItem:
    """One processed picture: ``pixel_values`` is float32 ``(channels, height, width)``."""

    pixel_values: torch.Tensor
    truncated: bool = False
    """Never true: a picture is resized to the model's size, never cut."""

    @property
    def cost(self) -> int:
        return int(self.pixel_values.shape[-1] * self.pixel_values.shape[-2])


@dataclass(frozen=True, slots=True)
class PixelBatch:
    """A stack of :class:`PixelItem` s, ``(rows, channels, height, width)``; its cost is rows x pixels."""

    pixel_values: torch.Tensor

    @property
    def padded_cost(self) -> int:
        shape = self.pixel_values.shape
        return int(shape[0] * shape[-1] * shape[-2])

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.pixel_values,)

    def pin_memory(self) -> PixelBatch:
        return self if self.pixel_values.is_pinned() else PixelBatch(self.pixel_values.pin_memory())

    def to(self, device: torch.device, *, non_blocking: bool = False) -> PixelBatch:
        return PixelBatch(self.pixel_values.to(device, non_blocking=non_blocking))


def stack_pixels(items: Sequence[PixelItem]) -> PixelBatch:
    """Stack items of one size; items of different sizes mean the processor does not fix one size."""
    shapes = {tuple(item.pixel_values.shape) for item in items}
    if len(shapes) != 1:
        raise ShardwiseError(
            f"image items of {len(shapes)} shapes {sorted(shapes)} in one batch; the model's image processor "
            "must resize (and crop) every picture to one size: set size/crop_size in preprocessor_config.json"
        )
    return PixelBatch(torch.stack([item.pixel_values for item in items]))


class DecodePool:
    """Prepare many values on ``threads`` threads; results (items or InputErrors) in input order.

    The threads start on first use and live as long as the pool; a window's
    values are all queued at once, so memory is bounded by the engine's
    ``window_rows``, threads by ``threads``.
    """

    def __init__(self, prepare: Callable[[object], Item], threads: int = DEFAULT_DECODE_THREADS) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self._prepare = prepare
        self._threads = threads
        self._executor: ThreadPoolExecutor | None = None

    def map(self, values: Sequence[object]) -> list[Item | InputError]:
        if self._threads == 1 or len(values) <= 1:
            return [self._one(value) for value in values]
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._threads, thread_name_prefix="shardwise-decode")
        return list(self._executor.map(self._one, values))

    def close(self) -> None:
        """Stop the threads (they stop with the process otherwise)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def _one(self, value: object) -> Item | InputError:
        try:
            return self._prepare(value)
        except InputError as exc:
            return exc
