"""Out-of-memory handling: split the batch, lower the budget, count the splits (simulated on CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_fakes import OOMAbove

from shardwise import DeviceOutOfMemoryError, Engine, EngineConfig, TransientError
from shardwise.batch.batching import CostBudget
from shardwise.batch.forward import Forward
from shardwise.model import Encoding


def _texts(n: int) -> list[tuple[int, str]]:
    return [(i, " ".join(f"word{j % 17}" for j in range(i % 40 + 3))) for i in range(n)]


def _encodings(rows: list[list[int]]) -> list[Encoding]:
    return [Encoding(ids, truncated=False) for ids in rows]


def test_oom_splits_batch_and_results_match(tiny_model) -> None:
    rows = _texts(300)
    want = [r.values["embedding"] for r in Engine(tiny_model).run(rows)]  # type: ignore[index]
    flaky = OOMAbove(tiny_model, limit=400)
    run = Engine(flaky, EngineConfig(max_tokens=2048)).run(rows)
    got = [r.values["embedding"] for r in run]  # type: ignore[index]
    np.testing.assert_allclose(np.stack(got), np.stack(want), atol=1e-5)
    assert run.stats.oom_splits > 0
    assert all(rows * width <= 400 for rows, width in flaky.calls[-5:]), "the budget was lowered"


def test_budget_is_lowered_for_the_rest_of_the_run(tiny_model) -> None:
    budget = CostBudget(4096)
    forward = Forward(OOMAbove(tiny_model, limit=100), budget, pad_to_multiple=1, precision="fp32")
    items = _encodings([[1, 5, 6, 2]] * 64)
    with torch.inference_mode():
        out = forward(items, tiny_model.collate(items))
    assert out["embedding"].shape == (64, 32)
    assert forward.oom_splits >= 2
    assert budget.value <= 128


def test_split_halves_are_repadded_to_their_own_longest(tiny_model) -> None:
    flaky = OOMAbove(tiny_model, limit=30)
    forward = Forward(flaky, CostBudget(4096), pad_to_multiple=1, precision="fp32")
    items = _encodings([[1, 2], [1, 2], [1, 3, 3, 3, 3, 3, 3, 3, 2], [1, 3, 3, 3, 3, 3, 3, 3, 2]])
    with torch.inference_mode():
        forward(items, tiny_model.collate(items))
    assert flaky.calls == [(4, 9), (2, 2), (2, 9)]
    assert flaky.collated == [2, 2], "each half is collated again from its items"


def test_single_row_oom_is_a_transient_error(tiny_model) -> None:
    forward = Forward(OOMAbove(tiny_model, limit=1), CostBudget(4096), pad_to_multiple=1, precision="fp32")
    items = _encodings([[1, 2, 3]])
    with (
        pytest.raises(DeviceOutOfMemoryError, match="single row of cost 3") as info,
        torch.inference_mode(),
    ):
        forward(items, tiny_model.collate(items))
    assert isinstance(info.value, TransientError)
    assert isinstance(info.value.__cause__, torch.OutOfMemoryError)


def test_forward_runs_under_inference_mode(tiny_model) -> None:
    seen = []

    class Spy(OOMAbove):
        def run(self, batch):  # type: ignore[no-untyped-def]
            seen.append(torch.is_inference_mode_enabled())
            return super().run(batch)

    list(Engine(Spy(tiny_model, limit=10**9)).run(_texts(20)))
    assert seen and all(seen)
