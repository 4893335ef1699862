"""Reading a local Hugging Face image model directory: what kind it is, its size, its files.

Shared by the image specs (:mod:`models.hf.images.image`) and the loaded image models
(:mod:`models.hf.images.loaded`, :mod:`models.hf.images.clip`). Only JSON is read here:
nothing loads weights, imports Pillow or touches the network.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shardwise.errors import ConfigError
from shardwise.models.hf.files import WEIGHTS, missing_files, read_json

__all__ = [
    "DUAL_ENCODERS",
    "IMAGE_VERSIONED",
    "PROCESSOR",
    "check_image_layout",
    "is_dual_encoder",
    "is_image_classifier",
    "is_vision_encoder",
    "load_image_processor",
    "processed_pixels",
]

PROCESSOR = "preprocessor_config.json"
IMAGE_VERSIONED = (
    "config.json",
    *WEIGHTS,
    PROCESSOR,
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
"""The files whose bytes make an image model's version (missing ones are skipped)."""
DUAL_ENCODERS = ("clip", "siglip")
"""``model_type`` s of image-and-text models whose two towers embed into one space."""


def _architectures(config: Mapping[str, Any]) -> list[str]:
    found = config.get("architectures")
    return [a for a in found if isinstance(a, str)] if isinstance(found, list) else []


def is_image_classifier(config: Mapping[str, Any]) -> bool:
    """Whether ``config.json`` names a ``…ForImageClassification`` architecture (ViT, ConvNeXt...)."""
    return any(a.endswith("ForImageClassification") for a in _architectures(config))


def is_dual_encoder(config: Mapping[str, Any]) -> bool:
    """Whether ``config.json`` is a whole CLIP or SigLIP model (both towers), not one tower of it."""
    return config.get("model_type") in DUAL_ENCODERS


def is_vision_encoder(root: Path, config: Mapping[str, Any]) -> bool:
    """Whether the directory holds an image model without a text tokenizer: an image encoder (ViT, DINOv2,
    ConvNeXt, a CLIP vision tower) to be read as an embedding.

    Its ``preprocessor_config.json`` must be an image processor's (it names one, or gives ``image_mean``):
    an audio model saves its feature extractor under the same name.
    """
    if not config or (root / "tokenizer.json").is_file():
        return False
    processor = read_json(root / PROCESSOR)
    return "image_processor_type" in processor or "image_mean" in processor


def check_image_layout(root: Path, *, text: bool) -> None:
    """Raise a :class:`ConfigError` naming what is missing unless ``root`` has config, weights and
    image processor (and a fast tokenizer when ``text``)."""
    if not root.is_dir():
        raise ConfigError(
            f"model path {str(root)!r} is not a directory; give a local Hugging Face model directory"
        )
    missing = missing_files(root, ("config.json", PROCESSOR, *(("tokenizer.json",) if text else ())))
    if missing:
        raise ConfigError(
            f"image model directory {str(root)!r} lacks {', '.join(missing)}; save the model and its "
            "processor with save_pretrained() and give that directory"
        )


def processed_pixels(root: Path) -> int:
    """Pixels per picture once the image processor has resized (and cropped) it, from its JSON."""
    config = read_json(root / PROCESSOR)
    crop = config.get("crop_size") if config.get("do_center_crop") else None
    size = crop or config.get("size")
    if isinstance(size, int) and not isinstance(size, bool):
        return size * size
    if isinstance(size, dict):
        height, width = size.get("height"), size.get("width")
        if isinstance(height, int) and isinstance(width, int):
            return height * width
        edge = size.get("shortest_edge")
        if isinstance(edge, int):
            return edge * edge
    raise ConfigError(
        f"image model directory {str(root)!r}: {PROCESSOR} gives no fixed size ({size!r}); give "
        '"size": {"height": H, "width": W} (or crop_size with do_center_crop), so every picture has one size'
    )


def load_image_processor(root: Path) -> Any:
    """The directory's image processor, Pillow-based (torchvision is not needed)."""
    import transformers
    from transformers import AutoImageProcessor

    major = int(transformers.__version__.split(".", 1)[0])
    choice = {"backend": "pil"} if major >= 5 else {"use_fast": False}
    return AutoImageProcessor.from_pretrained(root, local_files_only=True, **choice)
