"""Which spec a local Hugging Face directory loads as: a classifier, a generator or a sentence encoder.

``config.json`` decides: an ``architectures`` entry ending in
``ForSequenceClassification`` (a fine-tuned classifier, a sentence-transformers
CrossEncoder) loads as :class:`~models.hf_classifier.HFClassifierSpec`; one
ending in ``ForCausalLM`` (a decoder-only language model) as the text
generator :class:`~models.hf_causal.HFCausalSpec`; anything else as
:class:`~models.hf.HFEncoderSpec`. Only JSON is read.
"""

from __future__ import annotations

from pathlib import Path

from shardwise.models.hf import HFEncoderSpec
from shardwise.models.hf_causal import HFCausalSpec, is_causal_lm
from shardwise.models.hf_classifier import HFClassifierSpec
from shardwise.models.hf_files import read_json
from shardwise.models.hf_heads import is_classifier

__all__ = ["directory_spec"]


def directory_spec(path: Path, name: str = "") -> HFClassifierSpec | HFCausalSpec | HFEncoderSpec:
    """The spec for the model directory at ``path``; ``name`` defaults to ``hf:<path>``.

    A path that is not a usable directory still gets an encoder spec, whose
    :meth:`describe` says what is wrong with it.
    """
    root = Path(path).expanduser()
    config = read_json(root / "config.json")
    if is_classifier(config):
        return HFClassifierSpec(root, name)
    if is_causal_lm(config):
        return HFCausalSpec(root, name)
    return HFEncoderSpec(root, name)
