"""Padding efficiency and cost of ``cut_batches`` on generated corpora of very different shapes.

The corpora are token lengths drawn with fixed seeds, each one window of rows.
The cost is compared with the greedy rule ``cut_batches`` used before (kept
below as ``_greedy_cut``), which padded small corpora of short texts by more
than 5%.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch

from shardwise import EngineConfig
from shardwise.batch.batching import CostBudget, cut_batches, padded_length

# A small input, where lengths are sparse and padding is hardest to avoid, and a large one.
SIZES = (600, 2000)
SEEDS = range(3)
# What one more forward pass costs, in tokens of compute: MiniLM on a 2-thread
# CPU measured about 30 (forward pass alone) to 43 (the whole engine loop).
# The upper end, rounded up, is the price a batch is charged in the checks below.
FIXED_COST_TOKENS = 48

CORPORA: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "uniform-short": lambda rng, n: rng.integers(5, 41, n),
    "lognormal-short": lambda rng, n: np.clip(rng.lognormal(3.1, 0.45, n), 1, 256).astype(int),
    "lognormal": lambda rng, n: np.clip(rng.lognormal(3.3, 0.9, n), 1, 256).astype(int),
    "pareto": lambda rng, n: np.clip(8 * (1 + rng.pareto(1.5, n)), 1, 256).astype(int),
    "bimodal": lambda rng, n: np.concatenate(
        [rng.integers(8, 33, n * 7 // 10), rng.integers(150, 257, n - n * 7 // 10)]
    ),
    "uniform-long": lambda rng, n: rng.integers(100, 257, n),
}
LONG = ("bimodal", "uniform-long")
CASES = [(name, rows, seed) for name in CORPORA for rows in SIZES for seed in SEEDS]
LONG_CASES = [case for case in CASES if case[0] in LONG]


def _lengths(name: str, rows: int, seed: int) -> list[int]:
    return sorted(CORPORA[name](np.random.default_rng(seed), rows).tolist())


def _defaults(kind: str) -> EngineConfig:
    return EngineConfig().for_device(torch.device(kind))


def _cut(lengths: list[int], config: EngineConfig) -> list[tuple[int, int]]:
    assert config.max_tokens and config.max_batch_size and config.pad_to_multiple
    budget = CostBudget(config.max_tokens)
    return list(cut_batches(lengths, budget, config.max_batch_size, config.pad_to_multiple, config.pad_slack))


def _padded(lengths: list[int], spans: list[tuple[int, int]], multiple: int) -> int:
    return sum((stop - start) * padded_length(lengths[stop - 1], multiple) for start, stop in spans)


def _greedy_cut(lengths: list[int], config: EngineConfig) -> Iterator[tuple[int, int]]:
    """The rule this replaced: a row joins if it pads the rows already in the batch by at most the slack."""
    assert config.max_tokens and config.max_batch_size and config.pad_to_multiple
    assert config.pad_slack is not None
    widths = [padded_length(n, config.pad_to_multiple) for n in lengths]
    start = 0
    while start < len(widths):
        stop = start + 1
        while stop < len(widths) and stop - start < config.max_batch_size:
            if (stop - start + 1) * widths[stop] > config.max_tokens:
                break
            if (stop - start) * (widths[stop] - widths[stop - 1]) > config.pad_slack:
                break
            stop += 1
        yield start, stop
        start = stop


@pytest.mark.parametrize(("name", "rows", "seed"), CASES)
def test_cpu_defaults_pad_at_most_five_percent(name: str, rows: int, seed: int) -> None:
    config = _defaults("cpu")
    assert config.pad_to_multiple
    lengths = _lengths(name, rows, seed)
    spans = _cut(lengths, config)
    assert sum(lengths) / _padded(lengths, spans, config.pad_to_multiple) >= 0.95


def _time_in_tokens(lengths: list[int], spans: list[tuple[int, int]], fixed_cost: int) -> int:
    """Padded tokens plus a fixed cost per batch: a proxy for run time that padding alone cannot game."""
    return _padded(lengths, spans, 1) + fixed_cost * len(spans)


@pytest.mark.parametrize(("name", "rows", "seed"), CASES)
def test_cpu_defaults_cost_no_more_than_the_greedy_rule(name: str, rows: int, seed: int) -> None:
    """Priced as ``cut_batches`` prices a batch, its partition is never worse than the old one."""
    config = _defaults("cpu")
    assert config.pad_to_multiple == 1 and config.pad_slack is not None
    lengths = _lengths(name, rows, seed)
    ours = _time_in_tokens(lengths, _cut(lengths, config), config.pad_slack)
    assert ours <= _time_in_tokens(lengths, list(_greedy_cut(lengths, config)), config.pad_slack)


@pytest.mark.parametrize(("name", "rows", "seed"), LONG_CASES)
def test_long_texts_are_not_slower_than_with_the_greedy_rule(name: str, rows: int, seed: int) -> None:
    """Priced at the measured cost of a batch, the few batches added on long texts pay for themselves."""
    config = _defaults("cpu")
    assert config.pad_to_multiple == 1
    lengths = _lengths(name, rows, seed)
    ours = _time_in_tokens(lengths, _cut(lengths, config), FIXED_COST_TOKENS)
    assert ours <= _time_in_tokens(lengths, list(_greedy_cut(lengths, config)), FIXED_COST_TOKENS)


@pytest.mark.parametrize(("name", "rows", "seed"), CASES)
def test_cuda_defaults_give_valid_spans(name: str, rows: int, seed: int) -> None:
    config = _defaults("cuda")
    assert config.max_tokens and config.max_batch_size and config.pad_to_multiple
    lengths = _lengths(name, rows, seed)
    spans = _cut(lengths, config)
    assert [start for start, _ in spans] == [0] + [stop for _, stop in spans[:-1]]
    assert spans[-1][1] == len(lengths)
    for start, stop in spans:
        width = padded_length(lengths[stop - 1], config.pad_to_multiple)
        assert stop - start <= config.max_batch_size
        assert (stop - start) * width <= config.max_tokens
