"""A model takes what the source gives it: texts to a text model, pictures to an image model.

The model says what it scores (:attr:`~shardwise.model.ModelInfo.inputs`), the
source what its rows hold (:meth:`~shardwise.sources.base.Source.value_kind`),
and :func:`check_model_inputs` refuses a run in which they disagree, in one
line naming the model, the column and the fix, before anything is planned:
otherwise every row would be a dead letter of a run that exits 0. The cases:

* an image column or an image folder given to a model that scores only text;
* a text column given to a model that scores only pictures;
* a binary column read as text whose sampled values hold no text (pictures,
  or bytes that are not UTF-8), given to a model that scores only text. An
  image model takes such bytes as pictures, as it always has.

A model that declares nothing (``inputs=None``: a plug-in written before the
field) is not checked.
"""

from __future__ import annotations

from shardwise.errors import ConfigError
from shardwise.model import ModelInfo
from shardwise.sources.base import SourceValues

__all__ = ["check_model_inputs"]

_IMAGE_MODELS = "an image model (a local image model directory, such as a ViT or CLIP, or mobilenet-v2)"


def check_model_inputs(model: ModelInfo, given: SourceValues) -> None:
    """Raise a :class:`ConfigError` when ``model`` cannot score what the source gives (``given``)."""
    takes = model.inputs
    if takes is None:
        return
    if given.kind == "image" and "image" not in takes:
        fix = "" if given.column is None else ", or drop --image-column and name a column of text"
        raise ConfigError(
            f"model {model.name!r} scores text, and the {given.what} holds pictures; choose {_IMAGE_MODELS}"
            f"{fix}"
        )
    if given.kind == "text" and "text" not in takes:
        raise ConfigError(
            f"model {model.name!r} scores pictures, and the {given.what} holds text; name the column that "
            "holds the pictures (their bytes, or paths or s3:// URIs) with --image-column COLUMN, or "
            "choose a text model such as minilm"
        )
    if given.kind == "bytes" and "image" not in takes:
        raise ConfigError(
            f"model {model.name!r} scores text, and the {given.what} is {given.detail}; to score pictures "
            f"pass --image-column {given.column} (instead of --text-column) with {_IMAGE_MODELS}, or give "
            "--text-column a column of text"
        )
