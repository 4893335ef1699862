"""The model catalogue: names users can pass as ``--model``, and how each one loads.

``tiny`` (built in code, for tests), ``minilm`` (all-MiniLM-L6-v2), or the
path of any local Hugging Face model directory (optionally written
``hf:/path``): an encoder, or a sequence classifier or cross-encoder (see
:mod:`models.hf_directory`).
"""

from __future__ import annotations

from pathlib import Path

from models.hf import HFEncoderSpec
from models.hf_classifier import HFClassifierSpec
from models.hf_directory import directory_spec
from models.minilm import MiniLMSpec
from models.tiny import TinySpec
from shardwise.errors import UnknownModelError
from shardwise.model import ModelSpec

__all__ = ["CATALOGUE", "HFClassifierSpec", "HFEncoderSpec", "MiniLMSpec", "TinySpec", "get_spec"]

CATALOGUE: dict[str, ModelSpec] = {"minilm": MiniLMSpec(), "tiny": TinySpec()}


def get_spec(name: str) -> ModelSpec:
    """Look a model up by catalogue name or by local directory path."""
    if name in CATALOGUE:
        return CATALOGUE[name]
    path = Path(name.removeprefix("hf:")).expanduser()
    if name.startswith("hf:") or path.is_dir():
        return directory_spec(path)
    raise UnknownModelError(
        f"model {name!r} is not in the catalogue and is not a local directory; known models: "
        f"{', '.join(sorted(CATALOGUE))}, or the path of a Hugging Face model directory"
    )
