"""Order items by cost and cut them into batches that fit a cost budget.

An item's cost is what the model says one row costs (tokens for text,
pixels for an image). Sorting a window of items by cost and cutting batches
by padded cost (rows x largest item) is what keeps padding near zero:
neighbours in sorted order cost nearly the same, so each batch pads only a
little. The lengths below are costs; for text they are token counts.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import numpy as np

from shardwise.errors import ConfigError

__all__ = ["CostBudget", "cut_batches", "order_by_cost", "padded_length"]


class CostBudget:
    """The padded-cost limit (``max_tokens``), lowered by an out-of-memory split for the rest of the run.

    Shared between the thread that cuts batches and the thread that runs them.
    """

    def __init__(self, max_tokens: int) -> None:
        if max_tokens < 1:
            raise ConfigError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        self._value = max_tokens
        self._lock = threading.Lock()

    @property
    def value(self) -> int:
        return self._value

    def lower(self, max_tokens: int) -> int:
        """Lower the budget to ``max_tokens`` (never raise it, never below 1); return the new value."""
        with self._lock:
            self._value = max(1, min(self._value, max_tokens))
            return self._value


def order_by_cost(lengths: Sequence[int]) -> list[int]:
    """Positions sorted by cost, cheapest first; equal costs keep their input order."""
    return sorted(range(len(lengths)), key=lengths.__getitem__)


def padded_length(longest: int, multiple: int) -> int:
    """``longest`` rounded up to a multiple of ``multiple``."""
    return -(-longest // multiple) * multiple


def cut_batches(
    sorted_lengths: Sequence[int],
    budget: CostBudget,
    max_batch_size: int,
    multiple: int = 1,
    pad_slack: int | None = None,
) -> Iterator[tuple[int, int]]:
    """Yield ``[start, stop)`` spans of ascending lengths whose padded area fits the budget.

    Every batch keeps within ``budget`` (rows x padded longest row) and
    ``max_batch_size``. Within those limits the spans are the partition of
    least total cost, a batch costing its padded area plus ``pad_slack``: the
    slack prices a batch's fixed cost in tokens, so rows are split into one
    more batch only where that saves more than ``pad_slack`` tokens of
    padding. With ``pad_slack=None`` batches are filled greedily up to the
    limits, which gives the fewest batches.

    A row that alone exceeds the budget still forms a batch of one: it was
    already cut to the model's limit, and dropping it would lose data. The
    budget is read once per batch, so a lowered budget applies from the next
    cut; the rows not yet yielded are then partitioned again.
    """
    widths = np.asarray(sorted_lengths, dtype=np.int64)
    widths = -(-widths // multiple) * multiple
    if (falls := np.flatnonzero(widths[1:] < widths[:-1])).size:
        at = int(falls[0])
        raise ValueError(
            f"cut_batches needs lengths sorted shortest first, got {sorted_lengths[at]} before "
            f"{sorted_lengths[at + 1]} at position {at}; sort them with order_by_cost"
        )
    start, planned_for = 0, 0
    stops: Iterator[int] = iter(())
    while start < widths.size:
        limit = budget.value
        if pad_slack is None:
            stop = start + _greedy_rows(widths[start:], limit, max_batch_size)
        else:
            if limit != planned_for:
                plan = _cheapest_partition(widths[start:], limit, max_batch_size, pad_slack)
                stops, planned_for = iter([start + s for s in plan]), limit
            stop = next(stops)
        yield start, stop
        start = stop


def _capacity(width: int, limit: int, max_batch_size: int) -> int:
    """Most rows of ``width`` tokens a batch may hold; at least one, however wide."""
    return max(1, min(max_batch_size, limit // max(width, 1)))


def _greedy_rows(widths: np.ndarray, limit: int, max_batch_size: int) -> int:
    """How many of the leading rows fill one batch up to the limits."""
    rows = np.arange(1, min(max_batch_size, widths.size) + 1)
    # rows x widths only grows along ascending widths, so the rows that fit are a prefix.
    return max(1, int(np.count_nonzero(rows * widths[: rows.size] <= limit)))


def _cheapest_partition(widths: np.ndarray, limit: int, max_batch_size: int, pad_slack: int) -> list[int]:
    """The stops of the partition of ascending ``widths`` with least sum of (area + pad_slack).

    ``best[j]`` is the least cost of rows ``[0, j)``. For the stops ``j`` inside
    a run of equal width ``w`` (rows ``[a, b)``, at most ``c`` rows a batch),
    the optimum is: a first batch from some ``i <= a`` taking up to ``c`` rows,
    then full batches of width ``w``. So only ``i`` in ``[a + 1 - c, a]`` need
    trying, and ``best[j + c] = best[j] + c * w + slack``: a run costs
    O(c * min(c, b - a)) array work however long it is.
    """
    n = widths.size
    # Cost unit: one token is worth n + 1, one batch 1 more, so of equal-cost
    # partitions the one with fewer batches wins. A slack above the largest
    # possible area changes nothing, so it is clipped. Costs are floats, exact
    # up to 2**53 (far above an 8192-row window's); past that only optimality
    # suffers, never the limits, which the run capacities enforce.
    scale = n + 1
    slack = float(min(pad_slack, n * int(widths[-1]) + 1) * scale + 1)
    best = np.zeros(n + 1)
    first = np.zeros(n + 1, dtype=np.int64)  # where the first batch reaching the run starts
    runs = np.flatnonzero(np.diff(widths, prepend=-1, append=-1))
    for a, b in zip(runs[:-1].tolist(), runs[1:].tolist(), strict=True):
        width = int(widths[a])
        cap = _capacity(width, limit, max_batch_size)
        starts = np.arange(max(0, a + 1 - cap), a + 1)
        head = np.arange(a + 1, min(b, a + cap) + 1)
        # Stops within ``cap`` rows of ``a`` take one or two batches from a start.
        cost = (best[starts] - starts * width * scale)[None, :] + slack * (
            1 + (head[:, None] - starts[None, :] > cap)
        )
        pick = cost.argmin(axis=1)
        best[head] = cost[np.arange(head.size), pick] + head * width * scale
        first[head] = starts[pick]
        stop = np.arange(a + cap + 1, b + 1)
        laps, rest = np.divmod(stop - a - 1, cap)
        best[stop] = best[a + 1 + rest] + laps * (cap * width * scale + slack)
        first[stop] = first[a + 1 + rest]
    return _trace_stops(widths, first, limit, max_batch_size)


def _trace_stops(widths: np.ndarray, first: np.ndarray, limit: int, max_batch_size: int) -> list[int]:
    """Walk the partition back from the last row; full batches of one width are split evenly."""
    stops: list[int] = []
    stop = widths.size
    while stop > 0:
        start = int(first[stop])
        cap = _capacity(int(widths[stop - 1]), limit, max_batch_size)
        joined = min(stop, start + cap)  # the end of the batch that started at ``start``
        parts = -(-(stop - joined) // cap)
        stops.extend(joined + (stop - joined) * k // parts for k in range(parts, 0, -1))
        stops.append(joined)
        stop = start
    return stops[::-1]
