"""Which spec a local Hugging Face directory loads as: a classifier, a generator, an image model or a
sentence encoder.

``config.json`` decides: an ``architectures`` entry ending in
``ForSequenceClassification`` (a fine-tuned classifier, a sentence-transformers
CrossEncoder) loads as :class:`~models.hf.encoders.classifier.HFClassifierSpec`; one
ending in ``ForCausalLM`` (a decoder-only language model) as the text
generator :class:`~models.hf.causal.model.HFCausalSpec`; one ending in
``ForImageClassification`` (ViT, ConvNeXt) as
:class:`~models.hf.images.image.HFImageClassifierSpec`; a ``model_type`` of ``clip``
or ``siglip`` (both towers) as :class:`~models.hf.images.image.HFClipSpec`; a
directory with an image processor (``preprocessor_config.json``) and no
``tokenizer.json`` as the image encoder :class:`~models.hf.images.image.HFImageEncoderSpec`;
anything else as :class:`~models.hf.encoders.encoder.HFEncoderSpec`. Only JSON is read.
"""

from __future__ import annotations

from pathlib import Path

from shardwise.models.hf.causal.model import HFCausalSpec, is_causal_lm
from shardwise.models.hf.encoders.classifier import HFClassifierSpec
from shardwise.models.hf.encoders.encoder import HFEncoderSpec
from shardwise.models.hf.files import read_json
from shardwise.models.hf.heads import is_classifier
from shardwise.models.hf.images.files import is_dual_encoder, is_image_classifier, is_vision_encoder
from shardwise.models.hf.images.image import HFClipSpec, HFImageClassifierSpec, HFImageEncoderSpec

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
