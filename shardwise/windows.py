"""The producer side of the loop: read a window of rows, tokenise, sort, cut and pad.

This runs on the prefetcher's background thread, so everything here overlaps
with the model's forward pass on the batch before.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import torch

from shardwise.batching import TokenBudget, cut_batches, order_by_length
from shardwise.collate import collate_encodings
from shardwise.errors import InputError
from shardwise.model import Encoding, Model, ModelInputs, TextInput
from shardwise.text import coerce_input

__all__ = ["Batch", "Window", "produce_batches"]

Row = tuple[Hashable, Any]
"""An input row: its key, and the value to score (normally text, or a :class:`~shardwise.text.TextPair`)."""


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
    """Padded rows of one window, at ``positions`` within it.

    A window whose rows were all invalid is sent as one empty batch, so that it
    still reaches the consumer and its errors are reported in order.
    """

    window: Window
    positions: list[int]
    inputs: ModelInputs | None = None
    """None for the empty batch of a window whose rows were all invalid."""
    real_tokens: int = 0
    ready: Any = None
    """On CUDA, the event that marks the end of the host-to-device copy."""
    host: tuple[torch.Tensor, ...] = field(default=())
    """Pinned host tensors kept alive until their asynchronous copy has finished."""

    @property
    def padded_tokens(self) -> int:
        return 0 if self.inputs is None else int(self.inputs.input_ids.numel())


def produce_batches(
    rows: Iterable[Row],
    model: Model,
    *,
    window_rows: int,
    budget: TokenBudget,
    max_batch_size: int,
    pad_to_multiple: int,
    pad_slack: int | None,
    pin_memory: bool,
) -> Iterator[Batch]:
    """Turn rows into padded batches, one window at a time, so memory stays flat."""
    it = iter(rows)
    index = 0
    while chunk := list(islice(it, window_rows)):
        window, encoded = _encode_window(index, chunk, model)
        positions = [p for p in range(len(chunk)) if p not in window.errors]
        if not positions:
            yield Batch(window, [])
        lengths = [len(encoded[p].ids) for p in positions]
        order = order_by_length(lengths)
        spans = cut_batches([lengths[i] for i in order], budget, max_batch_size, pad_to_multiple, pad_slack)
        for start, stop in spans:
            members = [encoded[positions[i]] for i in order[start:stop]]
            yield _padded_batch(
                window, [positions[i] for i in order[start:stop]], members, model, pad_to_multiple, pin_memory
            )
        index += 1


def _padded_batch(
    window: Window, positions: list[int], rows: list[Encoding], model: Model, multiple: int, pin_memory: bool
) -> Batch:
    """One batch padded to its longest row; segment ids travel along when the rows carry them."""
    padded = collate_encodings(rows, model.pad_id, multiple, pin_memory)
    return Batch(window, positions, padded.inputs, padded.real_tokens)


def _encode_window(index: int, chunk: list[Row], model: Model) -> tuple[Window, dict[int, Encoding]]:
    """Check and tokenise every row of a window; bad rows become errors, not exceptions.

    A pair's length, for sorting and the token budget, is that of its joint
    encoding: both members and the special tokens between them.
    """
    errors: dict[int, InputError] = {}
    texts: list[TextInput] = []
    text_positions: list[int] = []
    for position, (_, value) in enumerate(chunk):
        try:
            texts.append(coerce_input(value))
            text_positions.append(position)
        except InputError as exc:
            errors[position] = exc
    truncated = [False] * len(chunk)
    encoded: dict[int, Encoding] = {}
    for position, encoding in zip(text_positions, model.tokenize(texts), strict=True):
        if not encoding.ids:
            errors[position] = InputError(
                f"text gives no tokens under model {model.name!r}; it holds nothing the tokenizer keeps"
            )
            continue
        encoded[position] = encoding
        truncated[position] = encoding.truncated
    window = Window(index, [key for key, _ in chunk], errors, truncated)
    return window, encoded
