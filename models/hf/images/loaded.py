"""Loaded image models: decode and process pictures in a pool of threads, stack them, run the network.

:class:`ImageLoaded` is what every image model shares: ``prepare`` decodes a
row's bytes (:func:`shardwise.model.images.decode`) and runs the directory's image
processor on the picture; ``prepare_many`` does that for a window's rows on a
:class:`~shardwise.model.image_model.DecodePool`; ``collate`` stacks. The image
classifier and the image encoder add their network and their outputs; CLIP
(:mod:`models.hf.images.clip`) adds a text tower.

Batches are budgeted in pixels: the engine's ``max_tokens`` defaults, for an
image model, to :data:`ROWS_PER_BATCH` pictures' worth of pixels per device kind.
Importing this module imports Pillow (:mod:`shardwise.model.images`), and
transformers is imported only when a model loads, after it: transformers looks
for Pillow when it is first imported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shardwise.errors import ConfigError, InputError
from shardwise.model import Item, ModelInfo
from shardwise.model.image_model import DecodePool, PixelBatch, PixelItem, stack_pixels
from shardwise.model.images import check_max_pixels, decode
from shardwise.models.hf.images.files import load_image_processor, processed_pixels

__all__ = ["ROWS_PER_BATCH", "HFImageClassifier", "HFImageEncoder", "ImageLoaded", "load_checked"]

ROWS_PER_BATCH = {"cpu": 32, "cuda": 256}
"""Pictures per batch by default, by device kind; the pixel budget is this many processed pictures."""


class ImageLoaded:
    """An image model's identity, processor and decoding pool, as described by ``info``, on ``device``."""

    def __init__(self, name: str, info: ModelInfo, root: Path, device: torch.device, max_pixels: int) -> None:
        self.name = name
        self.version = info.version
        self.outputs = info.outputs
        self.max_length = info.max_length
        self.device = device
        self.max_pixels = check_max_pixels(max_pixels)
        self._processor = load_image_processor(root)
        self._pool = DecodePool(self.prepare)
        pixels = processed_pixels(root)
        self.engine_defaults = {
            kind: {"max_tokens": rows * pixels, "max_batch_size": rows, "pad_to_multiple": 1}
            for kind, rows in ROWS_PER_BATCH.items()
        }

    def prepare(self, value: object) -> Any:
        """Decode a row's image and process it into a :class:`PixelItem`; InputError for a bad image."""
        return self.prepare_image(value)

    def prepare_image(self, value: object) -> PixelItem:
        picture = decode(value, self.max_pixels)
        try:
            # channels_last said outright: a 1-pixel-high picture would otherwise pass for channels-first.
            out = self._processor(images=picture, return_tensors="pt", input_data_format="channels_last")
        except ValueError as exc:
            raise InputError(f"image of {picture.width}x{picture.height} cannot be processed: {exc}") from exc
        return PixelItem(out["pixel_values"][0].to(torch.float32))

    def prepare_many(self, values: Sequence[object]) -> list[Item | InputError]:
        """:meth:`prepare` every value on the decoding pool's threads, in input order."""
        return self._pool.map(values)

    def collate(self, items: Sequence[Any], multiple: int = 1) -> Any:
        return stack_pixels(items)


def load_checked(auto: Any, root: Path, device: torch.device) -> Any:
    """``auto.from_pretrained(root)`` in eval mode on ``device``, refusing weights with missing keys."""
    net, loading = auto.from_pretrained(root, local_files_only=True, output_loading_info=True)
    if loading.get("missing_keys"):
        # transformers would fill them with random values: outputs would be noise.
        missing = ", ".join(sorted(loading["missing_keys"]))
        raise ConfigError(
            f"model directory {str(root)!r}: the weights lack {missing}; save the trained model with "
            "save_pretrained()"
        )
    return net.eval().to(device)


class HFImageClassifier(ImageLoaded):
    """A loaded ``…ForImageClassification``: :meth:`run` gives logits, :meth:`to_columns` its columns."""

    def __init__(self, spec: Any, device: torch.device) -> None:
        super().__init__(spec.name, spec.describe(), spec.path, device, spec.max_pixels)
        from transformers import AutoModelForImageClassification

        self._head = spec.head()
        self._net = load_checked(AutoModelForImageClassification, spec.path, device)

    def run(self, batch: PixelBatch) -> torch.Tensor:
        logits: torch.Tensor = self._net(pixel_values=batch.pixel_values).logits
        return logits

    def to_columns(self, outputs: torch.Tensor) -> Mapping[str, np.ndarray]:
        return self._head.columns(outputs)


class HFImageEncoder(ImageLoaded):
    """A loaded image encoder: its pooled output (else its first token) as ``embedding``."""

    def __init__(self, spec: Any, device: torch.device) -> None:
        super().__init__(spec.name, spec.describe(), spec.path, device, spec.max_pixels)
        from transformers import AutoModel

        self._net = load_checked(AutoModel, spec.path, device)

    def run(self, batch: PixelBatch) -> torch.Tensor:
        out = self._net(pixel_values=batch.pixel_values)
        pooled = getattr(out, "pooler_output", None)
        chosen: torch.Tensor = out.last_hidden_state[:, 0] if pooled is None else pooled
        return chosen.reshape(chosen.shape[0], -1)

    def to_columns(self, outputs: torch.Tensor) -> Mapping[str, np.ndarray]:
        return {"embedding": outputs.numpy()}
