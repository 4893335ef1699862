"""The engine is not text-shaped: a model of images goes through the same loop as a text encoder.

Its items cost their pixel count, its collate stacks images padded to the batch's largest; the engine
orders, cuts, collates, splits on out-of-memory and puts results back in input order, knowing none of it.
"""

from __future__ import annotations

import numpy as np
import torch
from engine_fakes import OOMAbove, PixelModel

from shardwise import BatchStats, Engine, EngineConfig, InputError, OutputColumn
from shardwise.batch.batching import CostBudget
from shardwise.batch.forward import Forward


def _images(sides: list[int], seed: int = 0) -> list[tuple[int, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(i, rng.integers(1, 10, (side, side)).astype(np.float32)) for i, side in enumerate(sides)]


def test_batches_are_cut_by_the_pixel_budget_and_come_back_in_input_order() -> None:
    rows = _images([int(s) for s in np.random.default_rng(1).choice([4, 8, 12, 16], 200)])
    model = PixelModel()
    seen: list[BatchStats] = []
    run = Engine(model, EngineConfig(max_tokens=1024, window_rows=64)).run(rows, on_batch=seen.append)
    results = list(run)
    assert [r.key for r in results] == [k for k, _ in rows]
    assert [r.values["total"] for r in results] == [float(img.sum()) for _, img in rows]  # type: ignore[index]
    assert [r.values["side"] for r in results] == [img.shape[0] for _, img in rows]  # type: ignore[index]
    assert all(b.padded_tokens <= 1024 for b in seen), "every batch keeps within the pixel budget"
    assert run.stats.real_tokens == sum(img.size for _, img in rows), "real cost is the pixel count"
    assert run.stats.padding_efficiency == 1.0, "ordered by cost, each batch holds images of one size"
    assert all(rows * side * side <= 1024 for rows, side, _ in model.batches)


def test_a_batch_is_padded_to_its_own_largest_item() -> None:
    rows = _images([4, 8, 4, 8])
    model = PixelModel()
    list(Engine(model, EngineConfig(max_tokens=4 * 16 + 2 * 64, pad_slack=0)).run(rows))
    assert sorted(model.batches) == [(2, 4, 4), (2, 8, 8)], "two sizes, two batches, no padding"
    model.batches.clear()
    list(Engine(model, EngineConfig(max_tokens=10_000, pad_slack=10_000)).run(rows))
    assert model.batches == [(4, 8, 8)], "one batch pads the small images to the large ones"


def test_an_oom_split_collates_each_half_again() -> None:
    rows = _images([4, 4, 4, 4, 16, 16])
    flaky = OOMAbove(PixelModel(), limit=300)
    forward = Forward(flaky, CostBudget(10_000), pad_to_multiple=1, precision="fp32")
    items = [flaky.prepare(img) for _, img in rows]
    with torch.inference_mode():
        columns = forward(items, flaky.collate(items))
    # [4 4 4 4 16 16] -> [4 4 4] + [4 16 16] -> [4] + [16 16] -> [16] + [16]: the half holding one
    # small image is collated again at its own size.
    assert flaky.calls == [
        (6, 16, 16),
        (3, 4, 4),
        (3, 16, 16),
        (1, 4, 4),
        (2, 16, 16),
        (1, 16, 16),
        (1, 16, 16),
    ]
    assert flaky.collated == [6, 3, 3, 1, 2, 1, 1], "each half is collated again from its items"
    assert columns["total"].tolist() == [float(img.sum()) for _, img in rows]
    assert forward.oom_splits == 3 and forward.budget.value <= 256


def test_the_engine_recovers_from_oom_with_the_same_results() -> None:
    rows = _images([int(s) for s in np.random.default_rng(2).choice([4, 8, 16], 60)])
    want = [r.values for r in Engine(PixelModel()).run(rows)]
    run = Engine(OOMAbove(PixelModel(), limit=600), EngineConfig(max_tokens=4096)).run(rows)
    assert [r.values for r in run] == want
    assert run.stats.oom_splits > 0


def test_a_row_prepare_refuses_is_a_dead_letter_and_the_rest_is_scored() -> None:
    good = _images([4, 8])
    rows = [(0, good[0][1]), (1, "not an image"), (2, np.zeros((0, 0))), (3, good[1][1]), (4, None)]
    run = Engine(PixelModel(), EngineConfig(window_rows=2)).run(rows)
    results = list(run)
    assert [(r.key, r.ok) for r in results] == [(0, True), (1, False), (2, False), (3, True), (4, False)]
    assert all(isinstance(r.error, InputError) for r in results if not r.ok)
    assert "square 2-D array, got str" in str(results[1].error) and "no pixels" in str(results[2].error)
    assert (run.stats.rows, run.stats.rows_failed) == (5, 3)


def test_a_cropped_image_is_truncated() -> None:
    (result,) = Engine(PixelModel()).run(_images([20]))
    assert result.truncated and result.values is not None and result.values["side"] == 16


class _CountedSides(PixelModel):
    """The image model with its int output declared a count: the engine sums it, as a generator's tokens."""

    outputs = (OutputColumn("total", "float"), OutputColumn("side", "int", count=True))


def test_the_engine_sums_the_outputs_a_model_declares_counts() -> None:
    good = _images([4] * 24 + [8, 12, 20])
    rows = [*good, (99, "not an image")]
    seen: list[BatchStats] = []
    run = Engine(OOMAbove(_CountedSides(), limit=300), EngineConfig(max_tokens=4096, window_rows=32)).run(
        rows, on_batch=seen.append
    )
    sides = [r.values["side"] for r in run if r.values is not None]
    assert run.stats.oom_splits > 0, "the counts of split batches add up too"
    assert run.stats.counts == {"side": sum(sides)} == {"side": 4 * 24 + 8 + 12 + 16}, "cropped to 16"
    assert sum(b.counts["side"] for b in seen) == run.stats.counts["side"]
    assert run.stats.as_dict()["counts_per_s"]["side"] > 0
    plain = Engine(PixelModel()).run(good)
    list(plain)
    assert plain.stats.counts == {} and plain.stats.as_dict()["counts_per_s"] == {}, "no count declared"
