"""Image model directories: decoding rules, agreement with transformers, dead letters, CLIP's shared space.

Every model is tiny and random (``tests/image_builders.py``); outputs are
checked against a plain transformers forward pass in float32 (Pillow opens
the bytes, the directory's processor prepares them, the model runs) on
pictures of many sizes, modes and formats, scored through the engine with a
small pixel budget so that a window spans several batches.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("PIL")
pytest.importorskip("transformers")

from image_builders import (
    LABELS,
    SIDE,
    SIGLIP_TEXT,
    encoded,
    exif_rotated_jpeg,
    picture,
    reference_picture,
    sample_photos,
    tiny_clip,
    tiny_convnext_classifier,
    tiny_siglip,
    tiny_vit_classifier,
    tiny_vit_encoder,
    varied_pictures,
)
from PIL import Image

from shardwise import Engine, EngineConfig, InputError
from shardwise.model import Model
from shardwise.model.binary_value import BinaryValue
from shardwise.model.images import decode
from shardwise.models import HFClipSpec, HFImageClassifierSpec, HFImageEncoderSpec, get_spec

CPU = torch.device("cpu")
ATOL = 1e-5
PIXELS = SIDE * SIDE


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("image-models")
    return {
        "vit": tiny_vit_classifier(root / "vit"),
        "encoder": tiny_vit_encoder(root / "encoder"),
        "clip": tiny_clip(root / "clip"),
        "siglip": tiny_siglip(root / "siglip"),
        "convnext": tiny_convnext_classifier(root / "convnext"),
    }


def _score(model: Model, values: Sequence[Any], batch_rows: int = 4) -> list[Any]:
    """Every row's result through the engine, in input order, batches of at most ``batch_rows`` pictures."""
    config = EngineConfig(precision="fp32", max_tokens=batch_rows * PIXELS, window_rows=8)
    run = Engine(model, config).run(enumerate(values))
    results = list(run)
    assert [r.key for r in results] == list(range(len(values)))
    return results


def _pixels(root: Path, pictures: Sequence[bytes]) -> torch.Tensor:
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(root, local_files_only=True, backend="pil")
    images = [reference_picture(p) for p in pictures]
    return processor(images=images, return_tensors="pt")["pixel_values"]


def test_decoding_makes_upright_rgb_with_transparency_on_white() -> None:
    rotated = decode(exif_rotated_jpeg((48, 24)))
    assert (rotated.mode, rotated.size) == ("RGB", (24, 48)), "EXIF orientation 6 turns it upright"
    clear = Image.new("RGBA", (4, 4), (10, 20, 30, 0))
    assert decode(encoded(clear, "PNG")).getpixel((0, 0)) == (255, 255, 255)
    for mode in ("L", "P", "LA", "RGBA", "CMYK", "I;16"):
        fmt = "JPEG" if mode == "CMYK" else "PNG"
        assert decode(BinaryValue(encoded(picture("RGB", (9, 7)).convert(mode), fmt))).mode == "RGB"


def _bad_inputs() -> dict[str, tuple[object, str]]:
    """Unusable values, each with a phrase its dead letter's reason must hold."""
    jpeg = encoded(picture("RGB", (64, 64)), "JPEG")
    png = encoded(picture("RGB", (8, 8)), "PNG")
    return {
        "truncated jpeg": (jpeg[: len(jpeg) // 2], "damaged"),
        "random bytes": (np.random.default_rng(1).bytes(500), "not an image"),
        "empty": (b"", "empty"),
        "text file": (b"id,text\n1,hello\n", "not an image"),
        "png header, garbage": (png[:16] + b"\x00garbage" * 8, "image"),
        "missing file": (BinaryValue(None, "/data/x.png", error="no such file"), "no such file"),
        "too large": (encoded(picture("RGB", (300, 200)), "PNG"), "over the limit of 50,000"),
        "a number": (42, "takes image bytes"),
    }


def test_bad_images_are_dead_letters_with_reasons_and_the_rest_is_scored(dirs: dict[str, Path]) -> None:
    model = HFImageClassifierSpec(dirs["vit"], max_pixels=50_000).load(CPU)
    bad = _bad_inputs()
    good = varied_pictures()[:4]
    values = [v for pair in zip(good, [v for v, _ in bad.values()], strict=False) for v in pair]
    values += [v for v, _ in list(bad.values())[len(good) :]]
    results = _score(model, values)
    reasons = {str(r.error) for r in results if not r.ok}
    assert len(reasons) == len(bad) and all(r.ok for r in results[0:8:2])
    for name, (_, phrase) in bad.items():
        assert any(phrase in reason for reason in reasons), (name, phrase, reasons)


@pytest.mark.parametrize("key", ["vit", "convnext"])
def test_classifier_agrees_with_transformers_in_input_order(dirs: dict[str, Path], key: str) -> None:
    from transformers import AutoModelForImageClassification

    pictures = varied_pictures()
    model = get_spec(str(dirs[key])).load(CPU)
    results = _score(model, pictures)
    assert all(r.ok for r in results)
    net = AutoModelForImageClassification.from_pretrained(dirs[key], local_files_only=True).eval()
    with torch.inference_mode():
        probs = net(pixel_values=_pixels(dirs[key], pictures)).logits.softmax(-1).numpy()
    got = np.stack([r.values["probabilities"] for r in results])
    np.testing.assert_allclose(got, probs, atol=ATOL)
    assert [r.values["label"] for r in results] == [LABELS[i] for i in probs.argmax(1)]
    assert len({r.values["label"] for r in results}) > 1, "random weights should still tell pictures apart"


def test_real_photographs_agree_with_transformers(dirs: dict[str, Path]) -> None:
    from transformers import AutoModelForImageClassification

    photos = sample_photos()
    results = _score(get_spec(str(dirs["vit"])).load(CPU), photos)
    net = AutoModelForImageClassification.from_pretrained(dirs["vit"], local_files_only=True).eval()
    with torch.inference_mode():
        logits = net(pixel_values=_pixels(dirs["vit"], photos)).logits
    got = np.stack([r.values["probabilities"] for r in results])
    np.testing.assert_allclose(got, logits.softmax(-1).numpy(), atol=ATOL)


def test_image_encoder_gives_the_pooled_output(dirs: dict[str, Path]) -> None:
    from transformers import AutoModel

    pictures = varied_pictures()
    results = _score(get_spec(str(dirs["encoder"])).load(CPU), pictures)
    net = AutoModel.from_pretrained(dirs["encoder"], local_files_only=True).eval()
    with torch.inference_mode():
        pooled = net(pixel_values=_pixels(dirs["encoder"], pictures)).pooler_output.numpy()
    np.testing.assert_allclose(np.stack([r.values["embedding"] for r in results]), pooled, atol=ATOL)


def _features(out: Any) -> torch.Tensor:
    tensor = out if isinstance(out, torch.Tensor) else out.pooler_output
    return torch.nn.functional.normalize(tensor, dim=-1)


@pytest.mark.parametrize(("key", "dim"), [("clip", 16), ("siglip", 32)])
def test_clip_embeds_texts_and_pictures_into_one_space(dirs: dict[str, Path], key: str, dim: int) -> None:
    from transformers import AutoModel, AutoTokenizer

    root = dirs[key]
    pictures = varied_pictures()
    texts = ["a photo of a cat", "shards and windows", "a much longer caption " * 3, "dog"]
    values: list[object] = [v for pair in zip(pictures, texts, strict=False) for v in pair] + pictures[4:]
    results = _score(get_spec(str(root)).load(CPU), values)
    assert all(r.ok for r in results)
    vectors = [r.values["embedding"] for r in results]
    assert {v.shape for v in vectors} == {(dim,)}
    net = AutoModel.from_pretrained(root, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(root, local_files_only=True)
    if key == "siglip":  # padded to its full length, no attention mask: as SigLIP's processor gives them
        padded = tokenizer(texts, padding="max_length", max_length=SIGLIP_TEXT, truncation=True)
        tokens = {"input_ids": torch.tensor(padded["input_ids"])}
    else:
        tokens = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        text = _features(net.get_text_features(**tokens)).numpy()
        image = _features(net.get_image_features(pixel_values=_pixels(root, pictures))).numpy()
    is_text = [isinstance(v, str) for v in values]
    np.testing.assert_allclose(
        np.stack([v for v, t in zip(vectors, is_text, strict=True) if t]), text, atol=ATOL
    )
    got_images = np.stack([v for v, t in zip(vectors, is_text, strict=True) if not t])
    np.testing.assert_allclose(got_images, image, atol=ATOL)
    ranking = got_images @ text[0]  # a text query ranks pictures by cosine, as pgvector's <=> would
    assert ranking.shape == (len(pictures),) and np.all(np.abs(ranking) <= 1 + 1e-6)


@pytest.mark.parametrize(
    ("key", "kind", "outputs"),
    [
        ("vit", HFImageClassifierSpec, ("label", "score", "probabilities")),
        ("convnext", HFImageClassifierSpec, ("label", "score", "probabilities")),
        ("siglip", HFClipSpec, ("embedding",)),
        ("encoder", HFImageEncoderSpec, ("embedding",)),
        ("clip", HFClipSpec, ("embedding",)),
    ],
)
def test_the_catalogue_picks_the_spec_from_config_json(
    dirs: dict[str, Path], key: str, kind: type, outputs: tuple[str, ...]
) -> None:
    spec = get_spec(str(dirs[key]))
    assert isinstance(spec, kind)
    info = spec.describe()
    assert tuple(c.name for c in info.outputs) == outputs
    assert info.version == spec.describe().version and len(info.version) == 64


def test_the_version_follows_the_files_and_the_pixel_limit(dirs: dict[str, Path], tmp_path: Path) -> None:
    spec = HFImageClassifierSpec(dirs["vit"])
    other = tiny_vit_classifier(tmp_path / "other", seed=1)
    assert HFImageClassifierSpec(other).describe().version != spec.describe().version
    assert HFImageClassifierSpec(dirs["vit"], max_pixels=10).describe().version.endswith("+max_pixels=10")


def test_prepare_many_decodes_in_threads_and_keeps_order(
    dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    model = get_spec(str(dirs["vit"])).load(CPU)
    seen: set[str] = set()
    prepare: Callable[[object], Any] = model.prepare_image  # type: ignore[attr-defined]

    def spy(value: object) -> Any:
        seen.add(threading.current_thread().name)
        return prepare(value)

    monkeypatch.setattr(model, "prepare_image", spy)
    values = varied_pictures() * 3 + [b"", io.BytesIO().getvalue()]
    outcomes = model.prepare_many(values)  # type: ignore[attr-defined]
    assert [isinstance(o, InputError) for o in outcomes] == [v == b"" for v in values]
    alone = [model.prepare(v).pixel_values for v in values[:5]]
    for got, want in zip(outcomes, alone, strict=False):
        assert torch.equal(got.pixel_values, want)
    assert any(name.startswith("shardwise-decode") for name in seen)


def test_an_audio_feature_extractor_is_not_taken_for_an_image_processor(tmp_path: Path) -> None:
    import json

    from shardwise.models import HFEncoderSpec

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "wav2vec2", "architectures": ["X"]}))
    (tmp_path / "preprocessor_config.json").write_text(
        json.dumps({"feature_extractor_type": "Wav2Vec2FeatureExtractor", "sampling_rate": 16000})
    )
    assert isinstance(get_spec(str(tmp_path)), HFEncoderSpec)
