"""Order rows by length and cut them into batches that fit a token budget.

Sorting a window of rows by token length and cutting batches by padded area
(rows x longest row) is what keeps padding near zero: neighbours in sorted
order have nearly the same length, so each batch pads only a little.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from shardwise.errors import ConfigError

__all__ = ["TokenBudget", "cut_batches", "order_by_length", "padded_length"]


class TokenBudget:
    """The padded-area limit of a batch, which an out-of-memory split lowers for the rest of a run.

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


def order_by_length(lengths: Sequence[int]) -> list[int]:
    """Positions sorted by length, shortest first; equal lengths keep their input order."""
    return sorted(range(len(lengths)), key=lengths.__getitem__)


def padded_length(longest: int, multiple: int) -> int:
    """``longest`` rounded up to a multiple of ``multiple``."""
    return -(-longest // multiple) * multiple


def cut_batches(
    sorted_lengths: Sequence[int],
    budget: TokenBudget,
    max_batch_size: int,
    multiple: int = 1,
    pad_slack: int | None = None,
) -> Iterator[tuple[int, int]]:
    """Yield ``[start, stop)`` spans of ascending lengths whose padded area fits the budget.

    A row joins the current batch only if the batch stays within ``budget``
    and ``max_batch_size``, and if widening the batch to that row pads the
    rows already in it by at most ``pad_slack`` tokens in all (None: no
    limit). The slack prices a new batch's fixed cost in tokens: a little
    padding is cheaper than one more forward pass, a lot is not.

    A row that alone exceeds the budget still forms a batch of one: it was
    already cut to the model's limit, and dropping it would lose data. The
    budget is read once per batch, so a lowered budget applies from the next cut.
    """
    n = len(sorted_lengths)
    start = 0
    while start < n:
        limit = budget.value
        width = padded_length(sorted_lengths[start], multiple)
        stop = start + 1
        while stop < n and stop - start < max_batch_size:
            # Ascending order: the row being added is the batch's longest.
            grown = padded_length(sorted_lengths[stop], multiple)
            if (stop - start + 1) * grown > limit:
                break
            if pad_slack is not None and (stop - start) * (grown - width) > pad_slack:
                break
            width = grown
            stop += 1
        yield start, stop
        start = stop
