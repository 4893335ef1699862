"""Ordering by length and cutting by token budget."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardwise.batch.batching import CostBudget, cut_batches, order_by_cost, padded_length
from shardwise.errors import ConfigError


def test_order_by_length_is_stable() -> None:
    assert order_by_cost([3, 1, 3, 2, 1]) == [1, 4, 3, 0, 2]


@pytest.mark.parametrize(("longest", "multiple", "want"), [(5, 1, 5), (5, 8, 8), (8, 8, 8), (9, 8, 16)])
def test_padded_length_rounds_up(longest: int, multiple: int, want: int) -> None:
    assert padded_length(longest, multiple) == want


@given(
    lengths=st.lists(st.integers(1, 300), min_size=0, max_size=400),
    max_tokens=st.integers(1, 5000),
    max_batch=st.integers(1, 64),
    multiple=st.sampled_from([1, 8]),
)
def test_batches_cover_every_row_once_and_fit_the_budget(
    lengths: list[int], max_tokens: int, max_batch: int, multiple: int
) -> None:
    ordered = sorted(lengths)
    spans = list(cut_batches(ordered, CostBudget(max_tokens), max_batch, multiple))
    covered = [i for start, stop in spans for i in range(start, stop)]
    assert covered == list(range(len(ordered)))
    for start, stop in spans:
        rows = stop - start
        assert rows <= max_batch
        area = rows * padded_length(ordered[stop - 1], multiple)
        assert area <= max_tokens or rows == 1, "only a lone over-budget row may exceed it"


@given(lengths=st.lists(st.integers(1, 64), min_size=1, max_size=200), max_tokens=st.integers(64, 2000))
def test_batches_are_greedy(lengths: list[int], max_tokens: int) -> None:
    """Each batch stops only because the next row would break the budget or the size cap."""
    ordered = sorted(lengths)
    spans = list(cut_batches(ordered, CostBudget(max_tokens), 1000))
    for start, stop in spans[:-1]:
        assert (stop - start + 1) * ordered[stop] > max_tokens


def _cost(spans: list[tuple[int, int]], widths: list[int], slack: int) -> int:
    return sum((stop - start) * widths[stop - 1] + slack for start, stop in spans)


def _least_cost(widths: list[int], max_tokens: int, max_batch: int, slack: int) -> int:
    """The cheapest partition's cost, by trying every batch that may start each suffix."""
    best = [0] * (len(widths) + 1)
    for start in range(len(widths) - 1, -1, -1):
        stops = range(start + 1, min(len(widths), start + max_batch) + 1)
        fits = [s for s in stops if s == start + 1 or (s - start) * widths[s - 1] <= max_tokens]
        best[start] = min((s - start) * widths[s - 1] + slack + best[s] for s in fits)
    return best[0]


@given(
    lengths=st.lists(st.integers(1, 64), min_size=1, max_size=40),
    max_tokens=st.integers(1, 400),
    max_batch=st.integers(1, 12),
    slack=st.integers(0, 100),
    multiple=st.sampled_from([1, 8]),
)
def test_pad_slack_gives_the_cheapest_partition(
    lengths: list[int], max_tokens: int, max_batch: int, slack: int, multiple: int
) -> None:
    """No partition within the limits costs less in padded area plus ``slack`` per batch."""
    ordered = sorted(lengths)
    widths = [padded_length(n, multiple) for n in ordered]
    spans = list(cut_batches(ordered, CostBudget(max_tokens), max_batch, multiple, pad_slack=slack))
    assert _cost(spans, widths, slack) == _least_cost(widths, max_tokens, max_batch, slack)


@given(
    lengths=st.lists(st.integers(1, 64), min_size=1, max_size=200),
    slack=st.integers(0, 100),
    multiple=st.sampled_from([1, 8]),
)
def test_neighbours_are_split_only_where_merging_pads_at_least_the_slack(
    lengths: list[int], slack: int, multiple: int
) -> None:
    ordered = sorted(lengths)
    spans = list(cut_batches(ordered, CostBudget(10**6), 10**6, multiple, pad_slack=slack))
    for (start, middle), (_, stop) in itertools.pairwise(spans):
        narrow, wide = (padded_length(ordered[i - 1], multiple) for i in (middle, stop))
        assert (middle - start) * (wide - narrow) >= slack


def test_zero_slack_gives_batches_of_equal_width() -> None:
    spans = list(cut_batches([3, 3, 4, 4, 4, 9], CostBudget(1000), 100, pad_slack=0))
    assert spans == [(0, 2), (2, 5), (5, 6)]


def test_lowered_budget_applies_from_the_next_batch() -> None:
    budget = CostBudget(100)
    spans = cut_batches([10] * 40, budget, 1000)
    assert next(spans) == (0, 10)
    budget.lower(50)
    assert next(spans) == (10, 15)


def test_lowered_budget_re_cuts_the_rows_not_yet_yielded() -> None:
    budget = CostBudget(100)
    spans = cut_batches([10] * 40, budget, 1000, pad_slack=5)
    assert next(spans) == (0, 10)
    budget.lower(50)
    assert list(spans) == [(start, start + 5) for start in range(10, 40, 5)]


def test_unsorted_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="sorted shortest first"):
        next(cut_batches([5, 3], CostBudget(100), 10, pad_slack=0))


def test_budget_never_rises_and_never_reaches_zero() -> None:
    budget = CostBudget(100)
    assert budget.lower(500) == 100
    assert budget.lower(0) == 1


def test_budget_rejects_non_positive() -> None:
    with pytest.raises(ConfigError, match="max_tokens must be a positive integer, got 0"):
        CostBudget(0)
