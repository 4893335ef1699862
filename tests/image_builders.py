"""Tiny, seeded image model directories (ViT, ConvNeXt, CLIP, SigLIP), and pictures made in code.

Each directory is a model of two small layers or stages with random weights from a fixed seed,
saved with ``save_pretrained`` with its image processor (Pillow backend) and,
for CLIP and SigLIP, a byte-level BPE tokenizer trained here on this package's
docstrings. Nothing is downloaded. :func:`reference_picture` opens bytes as a
plain Pillow user would, with the decoding rules ``shardwise.model.images``
documents (EXIF orientation, transparency on white), for the agreement tests.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageOps

SIDE = 32
"""The tiny models' input size: every picture is resized to SIDE x SIDE."""
LABELS = ("cat", "dog", "bird")


def _vit_config(**extra: Any) -> Any:
    from transformers import ViTConfig

    return ViTConfig(
        image_size=SIDE,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        **extra,
    )


def _vit_processor() -> Any:
    from transformers import ViTImageProcessorPil

    return ViTImageProcessorPil(size={"height": SIDE, "width": SIDE})


def tiny_vit_classifier(root: Path, labels: Sequence[str] = LABELS, seed: int = 0) -> Path:
    """Save a tiny random ``ViTForImageClassification`` and its processor to ``root``."""
    from transformers import ViTForImageClassification

    config = _vit_config(id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ViTForImageClassification(config).eval()
        torch.nn.init.normal_(model.classifier.weight)  # wide, so pictures get different labels
    model.save_pretrained(root)
    _vit_processor().save_pretrained(root)
    return root


def tiny_vit_encoder(root: Path, seed: int = 0) -> Path:
    """Save a tiny random ``ViTModel`` (with its pooler) and its processor to ``root``: no tokenizer."""
    from transformers import ViTModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ViTModel(_vit_config()).eval().save_pretrained(root)
    _vit_processor().save_pretrained(root)
    return root


def _bpe_tokenizer(context: int) -> tuple[Any, int]:
    """A byte-level BPE trained on this package's docstrings, CLIP's way (start and end of text around
    each text, padded with the end token), and its vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from shardwise.corpus import harvest_docstrings

    specials = ["<|startoftext|>", "<|endoftext|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(harvest_docstrings(200), trainer)
    bpe.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>", special_tokens=[(s, i) for i, s in enumerate(specials)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<|startoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        model_max_length=context,
    )
    return tokenizer, bpe.get_vocab_size()


_TOWER = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}


def tiny_clip(root: Path, seed: int = 0) -> Path:
    """Save a tiny random ``CLIPModel``, a CLIP image processor and a BPE tokenizer to ``root``."""
    from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel

    tokenizer, vocab = _bpe_tokenizer(77)
    text = {**_TOWER, "vocab_size": vocab, "max_position_embeddings": 77}
    text |= {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 1}
    vision = {**_TOWER, "image_size": SIDE, "patch_size": 8}
    config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        CLIPModel(config).eval().save_pretrained(root)
    processor = CLIPImageProcessorPil(
        size={"shortest_edge": SIDE}, crop_size={"height": SIDE, "width": SIDE}, do_center_crop=True
    )
    processor.save_pretrained(root)
    tokenizer.save_pretrained(root)
    return root


SIGLIP_TEXT = 16
"""The tiny SigLIP's text length: every text is padded to it, as SigLIP's are."""


def tiny_siglip(root: Path, seed: int = 0) -> Path:
    """Save a tiny random ``SiglipModel``, its image processor and a BPE tokenizer to ``root``."""
    from transformers import SiglipConfig, SiglipImageProcessorPil, SiglipModel

    tokenizer, vocab = _bpe_tokenizer(SIGLIP_TEXT)
    text = {**_TOWER, "vocab_size": vocab, "max_position_embeddings": SIGLIP_TEXT}
    text |= {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 1}
    vision = {**_TOWER, "image_size": SIDE, "patch_size": 8}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        SiglipModel(SiglipConfig(text_config=text, vision_config=vision)).eval().save_pretrained(root)
    SiglipImageProcessorPil(size={"height": SIDE, "width": SIDE}).save_pretrained(root)
    tokenizer.save_pretrained(root)
    return root


def tiny_convnext_classifier(root: Path, labels: Sequence[str] = LABELS, seed: int = 0) -> Path:
    """Save a tiny random ``ConvNextForImageClassification`` and its processor to ``root``."""
    from transformers import ConvNextConfig, ConvNextForImageClassification, ConvNextImageProcessorPil

    config = ConvNextConfig(
        hidden_sizes=[8, 16],
        depths=[1, 1],
        num_stages=2,
        id2label=dict(enumerate(labels)),
        label2id={n: i for i, n in enumerate(labels)},
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ConvNextForImageClassification(config).eval()
        torch.nn.init.normal_(model.classifier.weight)
    model.save_pretrained(root)
    ConvNextImageProcessorPil(size={"shortest_edge": SIDE}).save_pretrained(root)
    return root


def picture(mode: str, size: tuple[int, int], seed: int = 0) -> Image.Image:
    """A seeded noise picture in ``mode`` (RGB, L, RGBA, P...) of ``size`` (width, height)."""
    rng = np.random.default_rng(seed)
    rgba = rng.integers(0, 256, (size[1], size[0], 4), dtype=np.uint8)
    rgba[..., 3] = np.where(rng.random((size[1], size[0])) < 0.3, 0, 255)  # some fully transparent pixels
    base = Image.fromarray(rgba, "RGBA")
    if mode == "P":
        return base.convert("RGB").convert("P", palette=Image.Palette.ADAPTIVE)
    return base if mode == "RGBA" else base.convert(mode)


def encoded(image: Image.Image, fmt: str, **options: Any) -> bytes:
    """``image`` saved as ``fmt`` (PNG, JPEG, WEBP...)."""
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def exif_rotated_jpeg(size: tuple[int, int] = (48, 24), seed: int = 0) -> bytes:
    """A JPEG stored ``size`` wide whose EXIF orientation (6) says to turn it 90 degrees to view it."""
    exif = Image.Exif()
    exif[0x0112] = 6
    return encoded(picture("RGB", size, seed), "JPEG", exif=exif, quality=95)


def varied_pictures() -> list[bytes]:
    """Pictures of several sizes, modes and formats, the EXIF-rotated JPEG among them."""
    shapes = [(40, 30), (17, 64), (128, 96), (32, 32), (5, 3), (200, 50)]
    formats = [("RGB", "PNG"), ("L", "PNG"), ("RGBA", "PNG"), ("P", "PNG"), ("RGB", "JPEG"), ("RGB", "WEBP")]
    out = []
    for i, (size, (mode, fmt)) in enumerate(zip(shapes * 2, formats + formats[::-1], strict=True)):
        options = {"lossless": True} if fmt == "WEBP" else {}
        out.append(encoded(picture(mode, size, seed=i), fmt, **options))
    out.insert(3, exif_rotated_jpeg())
    return out


def reference_picture(data: bytes) -> Image.Image:
    """``data`` opened with Pillow alone: upright, RGB, transparency composited on white."""
    image = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    if image.mode in ("RGBA", "LA") or "transparency" in image.info:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


def sample_photos() -> list[bytes]:
    """scikit-learn's two sample photographs (a temple, a flower), as JPEG bytes: real pictures, offline."""
    from sklearn.datasets import load_sample_images

    return [encoded(Image.fromarray(array), "JPEG", quality=90) for array in load_sample_images().images]


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` and whose data is empty: a decompression
    bomb's shape, a few dozen bytes long (decoding it would need width x height x 3 bytes)."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    chunks = _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(b"")) + _chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + chunks


def gif_header(width: int, height: int, frame: tuple[int, int] = (1, 1)) -> bytes:
    """A GIF whose screen is ``width`` x ``height`` and whose one frame, at the origin, is ``frame``
    (which may reach past the screen), with one pixel of data."""
    screen = b"GIF89a" + struct.pack("<HHBBB", width, height, 0, 0, 0)  # no global colour table
    descriptor = b"," + struct.pack("<HHHHB", 0, 0, *frame, 0)
    return screen + descriptor + b"\x02\x02\x4c\x01\x00;"  # LZW minimum code size 2, one tiny block


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
