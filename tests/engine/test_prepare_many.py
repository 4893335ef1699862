"""A model's optional ``prepare_many``: the engine prepares a whole window with one call, in input order."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from engine_fakes import PixelModel

from shardwise import Engine, EngineConfig, ShardwiseError
from shardwise.errors import InputError
from shardwise.model import Item


class ManyPixels(PixelModel):
    """:class:`PixelModel` that prepares windows at once and records each window's size."""

    def __init__(self, drop_last: bool = False) -> None:
        super().__init__()
        self.windows: list[int] = []
        self.drop_last = drop_last

    def prepare_many(self, values: Sequence[object]) -> list[Item | InputError]:
        self.windows.append(len(values))
        outcomes: list[Item | InputError] = []
        for value in values:
            try:
                outcomes.append(self.prepare(value))
            except InputError as exc:
                outcomes.append(exc)
        return outcomes[:-1] if self.drop_last else outcomes


def _rows() -> list[tuple[int, object]]:
    rng = np.random.default_rng(0)
    return [(i, "not a picture" if i % 4 == 3 else rng.random((1 + i % 7, 1 + i % 7))) for i in range(20)]


def test_prepare_many_is_called_once_per_window_and_results_keep_input_order() -> None:
    model, plain = ManyPixels(), PixelModel()
    config = EngineConfig(window_rows=8, max_tokens=40)
    many = list(Engine(model, config).run(_rows()))
    one = list(Engine(plain, config).run(_rows()))
    assert model.windows == [8, 8, 4]
    assert [r.key for r in many] == list(range(20))
    assert [(r.ok, str(r.error)) for r in many] == [(r.ok, str(r.error)) for r in one]
    assert [r.values for r in many] == [r.values for r in one]


def test_prepare_many_must_give_one_outcome_per_row() -> None:
    with pytest.raises(ShardwiseError, match="gave 7 outcomes for 8 rows"):
        list(Engine(ManyPixels(drop_last=True), EngineConfig(window_rows=8)).run(_rows()))
