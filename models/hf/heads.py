"""A sequence-classification head read from ``config.json``, and how its logits become result columns.

Three kinds, decided by ``problem_type`` and the number of labels, as
``transformers`` itself decides them when it picks a training loss:

* **single-label** (no ``problem_type`` and two or more labels, or
  ``single_label_classification``): softmax over the labels. Columns
  ``label`` (text, from ``id2label``), ``score`` (float, the probability of
  that label) and ``probabilities`` (vector, in ``id2label`` order).
* **multi-label** (``multi_label_classification``): an independent sigmoid
  per label. Columns ``labels`` (text: a JSON array, in ``id2label`` order, of
  the labels whose probability is at least the threshold) and
  ``probabilities`` (vector).
* **regression** (no ``problem_type`` and one label, or ``regression``): one
  ``score`` (float). It is the raw logit, unless the directory says otherwise:
  a sentence-transformers CrossEncoder names its activation
  (``config_sentence_transformers.json`` → ``activation_fn`` since version 6,
  ``config.json`` → ``sentence_transformers`` → ``activation_fn`` in 4 and 5,
  ``sbert_ce_default_activation_function`` before), and ``Sigmoid`` makes the
  score a sigmoid, ``Identity`` keeps the logit. A directory marked as a
  CrossEncoder (``config_sentence_transformers.json`` says so) that names no
  activation gets sentence-transformers' own default for one label, Sigmoid.
  A plain Hugging Face regression head gets the raw logit: nothing in it says
  its output is a probability.

The activation only ever applies to a single-output head; a CrossEncoder with
several labels (an NLI model) is a single-label classifier like any other.
Softmax and sigmoid run in float32 on the CPU, whatever precision the model ran in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import torch

from shardwise.errors import ConfigError
from shardwise.model import OutputColumn

__all__ = ["DEFAULT_THRESHOLD", "Activation", "Head", "HeadKind", "is_classifier", "read_head"]

HeadKind = Literal["single_label", "multi_label", "regression"]
Activation = Literal["identity", "sigmoid"]
DEFAULT_THRESHOLD = 0.5
"""A multi-label head's default: a label is given when its probability is at least this."""

_PROBLEM_TYPES: dict[str, HeadKind] = {
    "single_label_classification": "single_label",
    "multi_label_classification": "multi_label",
    "regression": "regression",
}
_ACTIVATIONS: dict[str, Activation] = {"Identity": "identity", "Sigmoid": "sigmoid"}


def is_classifier(config: Mapping[str, Any]) -> bool:
    """Whether ``config.json`` names a ``…ForSequenceClassification`` architecture."""
    architectures = config.get("architectures")
    if not isinstance(architectures, list):
        return False
    return any(isinstance(a, str) and a.endswith("ForSequenceClassification") for a in architectures)


@dataclass(frozen=True)
class Head:
    """What a classifier's logits mean. ``labels`` is in id order; empty for regression."""

    kind: HeadKind
    labels: tuple[str, ...] = ()
    activation: Activation = "identity"
    """Applied to a regression score only."""
    threshold: float = DEFAULT_THRESHOLD
    """Used by a multi-label head only."""

    @property
    def width(self) -> int:
        """How many logits the model gives per row."""
        return 1 if self.kind == "regression" else len(self.labels)

    def outputs(self) -> tuple[OutputColumn, ...]:
        probabilities = OutputColumn("probabilities", "vector", len(self.labels))
        if self.kind == "single_label":
            return (OutputColumn("label", "text"), OutputColumn("score", "float"), probabilities)
        if self.kind == "multi_label":
            return (OutputColumn("labels", "text"), probabilities)
        return (OutputColumn("score", "float"),)

    def columns(self, logits: torch.Tensor) -> dict[str, np.ndarray]:
        """One entry per row per column: floats as float64 (plain Python floats to a driver),
        text as object arrays of ``str``, vectors as float32 rows."""
        logits = logits.detach().to("cpu", torch.float32)
        if logits.ndim != 2 or logits.shape[1] != self.width:
            raise ConfigError(
                f"classifier gave logits of shape {tuple(logits.shape)}; its config.json declares "
                f"{self.width} output(s) per row. Re-save the model so config.json matches its weights"
            )
        if self.kind == "regression":
            score = logits[:, 0].sigmoid() if self.activation == "sigmoid" else logits[:, 0]
            return {"score": score.numpy().astype(np.float64)}
        names = np.array(self.labels, dtype=object)
        if self.kind == "single_label":
            probs = logits.softmax(dim=1)
            best, index = probs.max(dim=1)
            label = names[index.numpy()]
            return {"label": label, "score": best.numpy().astype(np.float64), "probabilities": probs.numpy()}
        probs = logits.sigmoid()
        chosen = (probs >= self.threshold).numpy()
        labels = np.array([json.dumps(list(names[row]), ensure_ascii=False) for row in chosen], dtype=object)
        return {"labels": labels, "probabilities": probs.numpy()}


def read_head(config: Mapping[str, Any], st_config: Mapping[str, Any], where: str, threshold: float) -> Head:
    """The head ``config.json`` (and ``config_sentence_transformers.json``) describe, checked.

    ``where`` names the directory in error messages.
    """
    problem = config.get("problem_type")
    if problem is not None and problem not in _PROBLEM_TYPES:
        raise ConfigError(
            f"model directory {where!r}: config.json has problem_type {problem!r}; expected one of "
            f"{', '.join(_PROBLEM_TYPES)}, or none (then one label means regression, more mean single-label)"
        )
    labels = _labels(config, where)
    n = _num_labels(config, labels, where)
    kind: HeadKind = _PROBLEM_TYPES[problem] if problem else ("regression" if n == 1 else "single_label")
    _check_count(kind, n, where)
    if kind == "regression":
        return Head(kind, activation=_activation(config, st_config, where))
    if labels is None:
        raise ConfigError(
            f"model directory {where!r}: config.json has no id2label for its {n}-label classifier; add "
            f'"id2label": {{"0": "first label", "1": "second label", ...}} with one name per output'
        )
    return Head(kind, labels, threshold=threshold)


def _labels(config: Mapping[str, Any], where: str) -> tuple[str, ...] | None:
    """``id2label`` as names in id order, or None when config.json has none."""
    raw = config.get("id2label")
    if raw is None or raw == {}:
        return None
    ids: dict[int, str] = {}
    if isinstance(raw, dict):
        for key, name in raw.items():
            try:
                ids[int(key)] = str(name)
            except (TypeError, ValueError):
                break
    if not isinstance(raw, dict) or sorted(ids) != list(range(len(raw))):
        raise ConfigError(
            f"model directory {where!r}: config.json's id2label {raw!r} does not map the ids 0..n-1 to "
            'names; write it as {"0": "first label", "1": "second label", ...}'
        )
    return tuple(ids[i] for i in range(len(ids)))


def _num_labels(config: Mapping[str, Any], labels: tuple[str, ...] | None, where: str) -> int:
    declared = config.get("num_labels")
    if declared is None:
        if labels is None:
            raise ConfigError(
                f"model directory {where!r}: config.json gives neither num_labels nor id2label; add "
                '"id2label": {"0": "first label", ...} (one entry for a regression head)'
            )
        return len(labels)
    if not isinstance(declared, int) or isinstance(declared, bool) or declared < 1:
        raise ConfigError(
            f"model directory {where!r}: config.json has num_labels {declared!r}; "
            "it must be a positive integer"
        )
    if labels is not None and len(labels) != declared:
        raise ConfigError(
            f"model directory {where!r}: config.json has num_labels {declared} but id2label names "
            f"{len(labels)} label(s) ({', '.join(labels)}); make them agree (or drop num_labels)"
        )
    return declared


def _check_count(kind: HeadKind, n: int, where: str) -> None:
    if kind == "regression" and n != 1:
        raise ConfigError(
            f"model directory {where!r}: a regression head with {n} outputs is not supported; only one "
            "score per row is. Write a model spec of your own for several scores"
        )
    if kind == "single_label" and n < 2:
        raise ConfigError(
            f"model directory {where!r}: a single_label_classification head needs at least 2 labels; "
            f'got {n}. Use problem_type "regression" (one score) or "multi_label_classification"'
        )


def _activation(config: Mapping[str, Any], st_config: Mapping[str, Any], where: str) -> Activation:
    """The activation a sentence-transformers CrossEncoder names for its score (see the module docstring)."""
    legacy = config.get("sentence_transformers")
    named = (
        st_config.get("activation_fn")
        or (legacy.get("activation_fn") if isinstance(legacy, dict) else None)
        or config.get("sbert_ce_default_activation_function")
    )
    if named is None:
        return "sigmoid" if st_config.get("model_type") == "CrossEncoder" else "identity"
    short = str(named).rsplit(".", 1)[-1]
    if short not in _ACTIVATIONS:
        raise ConfigError(
            f"model directory {where!r}: the CrossEncoder's activation_fn {named!r} is not supported; "
            f"supported: torch.nn.Identity, torch.nn.Sigmoid ({', '.join(get_args(Activation))}). Write a "
            "model spec of your own for another activation"
        )
    return _ACTIVATIONS[short]
