"""Local Hugging Face image model directories, by path: image classifiers, image encoders, CLIP and SigLIP.

Which spec a directory gets is :func:`models.hf.directory.directory_spec`'s
decision, from ``config.json``:

* :class:`HFImageClassifierSpec`: a ``…ForImageClassification`` (ViT,
  ConvNeXt, ...) gives ``label`` (text), ``score`` (float) and
  ``probabilities`` (a vector, in ``id2label`` order), as the text classifier
  does (:mod:`models.hf.heads`).
* :class:`HFClipSpec`: a whole CLIP or SigLIP model (``model_type`` ``clip``
  or ``siglip``) gives ``embedding``: an image's image embedding, and a text
  row's text embedding, in the same space, so a text query finds images.
  Both are L2-normalised, as CLIP normalises them before comparing them.
* :class:`HFImageEncoderSpec`: any other directory with an image processor
  and no tokenizer (ViT, DINOv2, ConvNeXt) gives ``embedding``: the model's
  pooled output, else its first (CLS) token.

Every picture goes through :func:`shardwise.model.images.decode` (pixel limit
``max_pixels``, EXIF orientation, RGB with transparency on white), then the
directory's image processor. The version is a SHA-256 over the directory's
files (:data:`~models.hf.images.files.IMAGE_VERSIONED`), tagged with the kind.
Nothing here imports Pillow or transformers: that waits for :meth:`load`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from shardwise.errors import ConfigError
from shardwise.hashing import hash_files
from shardwise.model import IMAGES, TEXT, Model, ModelInfo, OutputColumn
from shardwise.models.hf.files import max_length_of, read_json
from shardwise.models.hf.heads import DEFAULT_THRESHOLD, Head, read_head
from shardwise.models.hf.images.files import (
    IMAGE_VERSIONED,
    check_image_layout,
    is_image_classifier,
    processed_pixels,
)

__all__ = ["DEFAULT_MAX_PIXELS", "HFClipSpec", "HFImageClassifierSpec", "HFImageEncoderSpec"]

DEFAULT_MAX_PIXELS = 50_000_000
"""The default ``max_pixels`` (as :data:`shardwise.model.images.DEFAULT_MAX_PIXELS`, without importing
Pillow)."""


@dataclass(frozen=True)
class _ImageSpec:
    """What every image spec holds: the directory, the name (``hf:<path>`` by default), the pixel limit."""

    path: Path
    name: str = ""
    max_pixels: int = DEFAULT_MAX_PIXELS
    """The largest picture decoded (width x height, before resizing); larger ones are dead letters."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path).expanduser().resolve())
        if not self.name:
            object.__setattr__(self, "name", f"hf:{self.path}")
        limit = self.max_pixels
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"max_pixels must be a positive whole number; got {limit!r}")

    images: ClassVar[bool] = True
    """Its rows are pictures: the pipeline commits them in smaller chunks (``IMAGE_CHUNK_ROWS``)."""

    def _require_packages(self) -> None:
        """Raise a ConfigError naming the extra to install when Pillow or transformers is missing."""
        try:
            import PIL  # noqa: F401
            import transformers  # noqa: F401
        except ImportError as exc:
            raise ConfigError(
                f"model {self.name!r} is an image model and needs Pillow and transformers; install them "
                "with: pip install 'shardwise[images]'"
            ) from exc

    def _version(self, tag: str) -> str:
        files = hash_files(self.path, IMAGE_VERSIONED)
        version = hashlib.sha256(f"{tag}\0{files}".encode()).hexdigest()
        return version if self.max_pixels == DEFAULT_MAX_PIXELS else f"{version}+max_pixels={self.max_pixels}"


@dataclass(frozen=True)
class HFImageClassifierSpec(_ImageSpec):
    """A local ``…ForImageClassification`` directory: ``label``, ``score``, ``probabilities``."""

    def describe(self) -> ModelInfo:
        """Read from the directory's JSON files and a hash of its files; no weights are loaded."""
        head = self.head()
        pixels = processed_pixels(self.path)
        version = self._version("image-classification")
        return ModelInfo(self.name, version, head.outputs(), pixels, inputs=IMAGES)

    def head(self) -> Head:
        """The classification head ``config.json`` describes (single- or multi-label)."""
        check_image_layout(self.path, text=False)
        config = read_json(self.path / "config.json")
        if not is_image_classifier(config):
            raise ConfigError(
                f"model directory {str(self.path)!r}: config.json names architectures "
                f"{config.get('architectures')!r}, not a ...ForImageClassification head"
            )
        return read_head(config, {}, str(self.path), DEFAULT_THRESHOLD)

    def load(self, device: torch.device) -> Model:
        self._require_packages()
        from shardwise.models.hf.images.loaded import HFImageClassifier

        return HFImageClassifier(self, device)


@dataclass(frozen=True)
class HFImageEncoderSpec(_ImageSpec):
    """A local image encoder directory (no tokenizer): one ``embedding`` per picture."""

    def describe(self) -> ModelInfo:
        check_image_layout(self.path, text=False)
        config = read_json(self.path / "config.json")
        outputs = (OutputColumn("embedding", "vector", _width(config, self.path)),)
        version, pixels = self._version("image-encoder"), processed_pixels(self.path)
        return ModelInfo(self.name, version, outputs, pixels, inputs=IMAGES)

    def load(self, device: torch.device) -> Model:
        self._require_packages()
        from shardwise.models.hf.images.loaded import HFImageEncoder

        return HFImageEncoder(self, device)


@dataclass(frozen=True)
class HFClipSpec(_ImageSpec):
    """A local CLIP or SigLIP directory: ``embedding`` of pictures and of texts, in one space.

    :attr:`ModelInfo.max_length` is the text tower's token limit.
    """

    def describe(self) -> ModelInfo:
        check_image_layout(self.path, text=True)
        config = read_json(self.path / "config.json")
        outputs = (OutputColumn("embedding", "vector", _clip_width(config, self.path)),)
        version = self._version("dual-encoder")
        return ModelInfo(self.name, version, outputs, self.text_length(), inputs=TEXT | IMAGES)

    def text_length(self) -> int:
        """The longest text in tokens: the tokenizer's limit, never more than the text tower's positions."""
        config = read_json(self.path / "config.json")
        text = config.get("text_config")
        return max_length_of(self.path, text if isinstance(text, dict) else {})

    def load(self, device: torch.device) -> Model:
        self._require_packages()
        from shardwise.models.hf.images.clip import HFClip

        return HFClip(self, device)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _width(config: dict[str, Any], root: Path) -> int:
    """An image encoder's pooled width: ``hidden_size``, or the last stage's (ConvNeXt ``hidden_sizes``)."""
    sizes = config.get("hidden_sizes")
    found = _int(sizes[-1]) if isinstance(sizes, list) and sizes else _int(config.get("hidden_size"))
    if found is None:
        raise ConfigError(
            f"model directory {str(root)!r}: config.json gives no integer hidden_size (nor hidden_sizes); "
            "give an image encoder saved with save_pretrained()"
        )
    return found


def _clip_width(config: dict[str, Any], root: Path) -> int:
    """CLIP's ``projection_dim``; SigLIP has no projection, so its vision tower's ``hidden_size``."""
    vision = config.get("vision_config")
    found = _int(config.get("projection_dim"))
    if found is None and isinstance(vision, dict):
        found = _int(vision.get("hidden_size"))
    if found is None:
        raise ConfigError(
            f"model directory {str(root)!r}: config.json gives neither projection_dim nor "
            "vision_config.hidden_size; re-save the CLIP or SigLIP model with save_pretrained()"
        )
    return found
