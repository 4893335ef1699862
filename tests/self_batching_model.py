"""A model kind that batches by itself, for tests: it upper-cases texts a window at a time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from shardwise.errors import InputError
from shardwise.model import TEXT, ModelInfo, OutputColumn
from shardwise.model.text import coerce_text

OUTPUTS = (OutputColumn("shout", "text"), OutputColumn("letters", "int", count=True))


@dataclass
class Shouter:
    """Upper-cases each text, a window at a time; a text holding "bad" is refused by the model."""

    windows: list[int] = field(default_factory=list)
    name: str = "shouter"
    version: str = "v1"
    max_length: int = 1000
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    outputs: tuple[OutputColumn, ...] = OUTPUTS

    def score_window(self, values: Sequence[object]) -> list[Mapping[str, Any] | InputError]:
        self.windows.append(len(values))
        return [_shout(value) for value in values]


@dataclass(frozen=True)
class ShouterSpec:
    name: str = "shouter"
    loaded: list[Shouter] = field(default_factory=list, compare=False)

    def describe(self) -> ModelInfo:
        return ModelInfo(self.name, "v1", OUTPUTS, 1000, inputs=TEXT)

    def load(self, device: torch.device) -> Shouter:
        model = Shouter(device=device)
        self.loaded.append(model)
        return model


def _shout(value: object) -> Mapping[str, Any] | InputError:
    try:
        text = coerce_text(value)  # the checks every text model makes: null, empty, not text
    except InputError as exc:
        return exc
    if "bad" in text:
        return InputError(f"refused {text[:20]!r}")
    return {"shout": text.upper(), "letters": len(text)}
