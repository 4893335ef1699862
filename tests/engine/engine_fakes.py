"""Test doubles at the model protocol boundary: a model that runs out of memory, and one that is not text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from shardwise.errors import InputError
from shardwise.model import DeviceBatch, Item, Model, OutputColumn


class OOMAbove:
    """Wraps a real model and raises a CUDA-style out-of-memory error for batches over ``limit`` in cost.

    ``calls`` records the shape of each batch's first tensor (rows x width for text), ``collated`` the
    number of items of every batch it collated.
    """

    def __init__(self, inner: Model, limit: int) -> None:
        self.inner = inner
        self.limit = limit
        self.name = inner.name
        self.version = inner.version
        self.max_length = inner.max_length
        self.device = inner.device
        self.outputs = inner.outputs
        self.calls: list[tuple[int, ...]] = []
        self.collated: list[int] = []

    def prepare(self, value: object) -> Item:
        return self.inner.prepare(value)

    def collate(self, items: Sequence[Item], multiple: int = 1) -> DeviceBatch:
        self.collated.append(len(items))
        return self.inner.collate(items, multiple)

    def run(self, batch: DeviceBatch) -> torch.Tensor:
        cost = batch.padded_cost
        self.calls.append(tuple(batch.tensors()[0].shape))
        if cost > self.limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory (simulated: {cost} > {self.limit})")
        return self.inner.run(batch)

    def to_columns(self, outputs: torch.Tensor) -> Mapping[str, np.ndarray]:
        return self.inner.to_columns(outputs)


@dataclass(frozen=True)
class Picture:
    """An image item: a square of pixels; its cost is its pixel count."""

    pixels: torch.Tensor
    truncated: bool = False

    @property
    def cost(self) -> int:
        return int(self.pixels.numel())


@dataclass(frozen=True)
class Pictures:
    """A batch of images, each padded with zeros (bottom and right) to the batch's largest side."""

    pixels: torch.Tensor

    @property
    def padded_cost(self) -> int:
        return int(self.pixels.numel())

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.pixels,)

    def pin_memory(self) -> Pictures:
        return Pictures(self.pixels.pin_memory())

    def to(self, device: torch.device, *, non_blocking: bool = False) -> Pictures:
        return Pictures(self.pixels.to(device, non_blocking=non_blocking))


class PixelModel:
    """A model that knows no text: rows are square grayscale images (2-D arrays), outputs their sums.

    Images wider than ``max_length`` pixels are cropped (truncated). The sum of an image is the same
    however much zero padding its batch added, so a result shows whether the row it belongs to was
    scored, and scored whole.
    """

    name = "pixels"
    version = "pixels-1"
    max_length = 16
    outputs = (OutputColumn("total", "float"), OutputColumn("side", "int"))

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device or torch.device("cpu")
        self.batches: list[tuple[int, ...]] = []

    def prepare(self, value: object) -> Picture:
        if not isinstance(value, np.ndarray) or value.ndim != 2 or value.shape[0] != value.shape[1]:
            raise InputError(f"an image must be a square 2-D array, got {type(value).__name__}")
        if value.size == 0:
            raise InputError("the image has no pixels")
        side = min(value.shape[0], self.max_length)
        return Picture(torch.from_numpy(value[:side, :side]).float(), truncated=side < value.shape[0])

    def collate(self, items: Sequence[Picture], multiple: int = 1) -> Pictures:
        side = -(-max(int(p.pixels.shape[0]) for p in items) // multiple) * multiple
        out = torch.zeros((len(items), side, side))
        for row, picture in enumerate(items):
            n = picture.pixels.shape[0]
            out[row, :n, :n] = picture.pixels
        return Pictures(out)

    def run(self, batch: Pictures) -> torch.Tensor:
        self.batches.append(tuple(batch.pixels.shape))
        pixels = batch.pixels
        side = (pixels != 0).any(dim=1).sum(dim=1, keepdim=True).float()  # columns holding a pixel
        return torch.cat([pixels.sum(dim=(1, 2))[:, None], side], dim=1)

    def to_columns(self, outputs: torch.Tensor) -> Mapping[str, np.ndarray]:
        return {
            "total": outputs[:, 0].numpy().astype(np.float64),
            "side": outputs[:, 1].numpy().astype(np.int64),
        }
