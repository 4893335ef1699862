"""The producer side of the loop: read a window of rows, prepare, order by cost, cut and collate.

This runs on the prefetcher's background thread, so everything here overlaps
with the model's forward pass on the batch before. Nothing here knows what
an item is: the model prepares rows into items with a cost, and collates
(pads) a batch of them.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from shardwise.batch.batching import CostBudget, cut_batches, order_by_cost
from shardwise.errors import InputError, ShardwiseError
from shardwise.model import DeviceBatch, Item, Model

__all__ = ["Batch", "Window", "produce_batches"]

Row = tuple[Hashable, Any]
"""An input row: its key, and the value to score (normally text, or a
:class:`~shardwise.model.text.Inputs`)."""


@dataclass(slots=True)
class Window:
    """Up to ``window_rows`` consecutive input rows, scored together and returned in input order."""

    index: int
    keys: list[Hashable]
    errors: dict[int, InputError]
    truncated: list[bool]

    @property
    def valid_rows(self) -> int:
        return len(self.keys) - len(self.errors)


@dataclass(slots=True)
class Batch:
    """Collated items of one window, at ``positions`` within it.

    A window whose rows were all invalid is sent as one empty batch, so that it
    still reaches the consumer and its errors are reported in order.
    """

    window: Window
    positions: list[int]
    items: list[Item]
    """The prepared items, in batch order: an out-of-memory split collates halves of them again."""
    inputs: DeviceBatch | None = None
    """The collated batch (on the device once staged); None for a window whose rows were all invalid."""
    real_cost: int = 0
    """The items' own cost, without padding: tokens for text."""
    ready: Any = None
    """On CUDA, the event that marks the end of the host-to-device copy."""
    host: DeviceBatch | None = None
    """The pinned host batch, kept alive until its asynchronous copy has finished."""

    @property
    def padded_cost(self) -> int:
        return 0 if self.inputs is None else self.inputs.padded_cost


def produce_batches(
    rows: Iterable[Row],
    model: Model,
    *,
    window_rows: int,
    budget: CostBudget,
    max_batch_size: int,
    pad_to_multiple: int,
    pad_slack: int | None,
) -> Iterator[Batch]:
    """Turn rows into collated batches, one window at a time, so memory stays flat."""
    it = iter(rows)
    index = 0
    while chunk := list(islice(it, window_rows)):
        window, prepared = _prepare_window(index, chunk, model)
        positions = sorted(prepared)
        if not positions:
            yield Batch(window, [], [])
        costs = [prepared[p].cost for p in positions]
        order = order_by_cost(costs)
        spans = cut_batches([costs[i] for i in order], budget, max_batch_size, pad_to_multiple, pad_slack)
        for start, stop in spans:
            members = [positions[i] for i in order[start:stop]]
            items = [prepared[p] for p in members]
            inputs = model.collate(items, pad_to_multiple)
            yield Batch(window, members, items, inputs, sum(item.cost for item in items))
        index += 1


def _prepare_window(index: int, chunk: list[Row], model: Model) -> tuple[Window, dict[int, Item]]:
    """Prepare every row of a window; a row the model cannot prepare becomes an error, not an exception.

    A model with the optional ``prepare_many(values) -> list[Item | InputError]``
    (image models: it decodes in a pool of threads) prepares the whole window in
    one call; any other is asked row by row.
    """
    errors: dict[int, InputError] = {}
    prepared: dict[int, Item] = {}
    truncated = [False] * len(chunk)
    for position, outcome in enumerate(_outcomes(chunk, model)):
        if isinstance(outcome, InputError):
            errors[position] = outcome
            continue
        prepared[position] = outcome
        truncated[position] = outcome.truncated
    window = Window(index, [key for key, _ in chunk], errors, truncated)
    return window, prepared


def _outcomes(chunk: list[Row], model: Model) -> Iterator[Item | InputError]:
    """Each row's item or the InputError that kept it from one, in input order."""
    if any(isinstance(value, InputError) for _, value in chunk):
        yield from _with_unreadable(chunk, model)
        return
    many = getattr(model, "prepare_many", None)  # optional: see Model in shardwise.model
    if many is None:
        for _, value in chunk:
            try:
                yield model.prepare(value)
            except InputError as exc:
                yield exc
        return
    outcomes = list(many([value for _, value in chunk]))
    if len(outcomes) != len(chunk):
        raise ShardwiseError(
            f"model {model.name!r}: prepare_many gave {len(outcomes)} outcomes for {len(chunk)} rows; "
            "it must give one item or InputError per value, in input order"
        )
    yield from outcomes


def _with_unreadable(chunk: list[Row], model: Model) -> Iterator[Item | InputError]:
    """A source hands over a row it could not read (an unparsable line) as the InputError saying why:
    that is the row's outcome, a dead letter, and the model prepares the others."""
    readable = [(key, value) for key, value in chunk if not isinstance(value, InputError)]
    prepared = iter(list(_outcomes(readable, model)))
    for _, value in chunk:
        yield value if isinstance(value, InputError) else next(prepared)
