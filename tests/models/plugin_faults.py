"""Model plug-ins with one fault each, for the command line's one-line errors.

tests/flows/test_cli_errors.py runs them.

Each wraps a small tiny encoder and changes what its ``describe()`` says.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import torch

from shardwise.model import ModelInfo, OutputColumn
from shardwise.models.hf.encoders.tiny import TinyModel, TinySpec

_TINY = TinySpec(name="faulty", dim=16, layers=1, heads=2)
_CALLS = itertools.count()


class Changed:
    """The small tiny encoder, its description changed by ``changes`` (a callable is called each time)."""

    name = "faulty"

    def __init__(self, **changes: Any) -> None:
        self.changes = changes

    def describe(self) -> ModelInfo:
        made = {k: v() if callable(v) else v for k, v in self.changes.items()}
        return replace(_TINY.describe(), **made)

    def load(self, device: torch.device) -> TinyModel:
        return _TINY.load(device)


class Failing(Changed):
    def describe(self) -> ModelInfo:
        raise FileNotFoundError("weights.bin")


timestamped = Changed(version=lambda: f"run-{next(_CALLS)}")
no_outputs = Changed(outputs=())
taken_column = Changed(outputs=(OutputColumn("model_version", "float"),))
no_length = Changed(max_length=0)
no_pairs = Changed(name="faulty", pairs=False)
"""Well formed, but it scores single texts only."""
failing = Failing()
