"""Which spec a local Hugging Face directory loads as: a classifier, a generator, an image model or a
sentence encoder.

``config.json`` decides: an ``architectures`` entry ending in
``ForSequenceClassification`` (a fine-tuned classifier, a sentence-transformers
CrossEncoder) loads as :class:`~models.hf_classifier.HFClassifierSpec`; one
ending in ``ForCausalLM`` (a decoder-only language model) as the text
generator :class:`~models.hf_causal.HFCausalSpec`; one ending in
``ForImageClassification`` (ViT, ConvNeXt) as
:class:`~models.hf_image.HFImageClassifierSpec`; a ``model_type`` of ``clip``
or ``siglip`` (both towers) as :class:`~models.hf_image.HFClipSpec`; a
directory with an image processor (``preprocessor_config.json``) and no
``tokenizer.json`` as the image encoder :class:`~models.hf_image.HFImageEncoderSpec`;
anything else as :class:`~models.hf.HFEncoderSpec`. Only JSON is read.
"""

from __future__ import annotations

from pathlib import Path

from shardwise.models.hf import HFEncoderSpec
from shardwise.models.hf_causal import HFCausalSpec, is_causal_lm
from shardwise.models.hf_classifier import HFClassifierSpec
from shardwise.models.hf_files import read_json
from shardwise.models.hf_heads import is_classifier
from shardwise.models.hf_image import HFClipSpec, HFImageClassifierSpec, HFImageEncoderSpec
from shardwise.models.hf_image_files import is_dual_encoder, is_image_classifier, is_vision_encoder

__all__ = ["DirectorySpec", "directory_spec"]


DirectorySpec = (
    HFClassifierSpec | HFCausalSpec | HFImageClassifierSpec | HFClipSpec | HFImageEncoderSpec | HFEncoderSpec
)


def directory_spec(path: Path, name: str = "") -> DirectorySpec:
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
    if is_image_classifier(config):
        return HFImageClassifierSpec(root, name)
    if is_dual_encoder(config):
        return HFClipSpec(root, name)
    if is_vision_encoder(root, config):
        return HFImageEncoderSpec(root, name)
    return HFEncoderSpec(root, name)
