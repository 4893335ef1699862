"""The batched inference loop: prepare -> order by cost -> cut by budget -> collate -> prefetch -> run
-> un-permute.

Each step is a small function in its own module; this one wires them
together and puts the outputs back in input order. The model is whatever
implements :class:`~shardwise.model.Model`: the loop sees items with a cost
and batches it can move to the device, never tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import torch

from shardwise.batch.batching import CostBudget
from shardwise.batch.config import EngineConfig
from shardwise.batch.forward import Forward
from shardwise.batch.prefetch import Prefetcher
from shardwise.batch.stats import BatchStats, EngineStats
from shardwise.batch.windows import Batch, Row, Window, produce_batches
from shardwise.closing import Closing
from shardwise.errors import InputError, ShardwiseError
from shardwise.model import REJECTED, Model, SelfBatching
from shardwise.model.counts import count_columns, counts_of_columns, counts_of_rows
from shardwise.model.recorded import BatchBook, Recorded, WindowRef

__all__ = ["Engine", "EngineRun", "RowResult"]


@dataclass(frozen=True, slots=True)
class RowResult:
    """The outcome for one input row: output values, or the error that kept it from being scored."""

    key: Hashable
    values: Mapping[str, Any] | None
    truncated: bool = False
    """The input was longer than the model's limit and only part of it was scored (see ``Item.truncated``)."""
    error: InputError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Engine:
    """Scores rows with one loaded model. Orchestrator-free: usable from a notebook or a worker."""

    def __init__(self, model: Model | SelfBatching, config: EngineConfig | None = None) -> None:
        self.model = model
        defaults = getattr(model, "engine_defaults", None)  # optional: see Model in shardwise.model
        self.config = (config or EngineConfig()).for_device(model.device, model.outputs, defaults)

    def run(
        self,
        rows: Iterable[Row],
        on_batch: Callable[[BatchStats], None] | None = None,
        book: BatchBook | None = None,
    ) -> EngineRun:
        """Score ``(key, value)`` rows lazily (the model prepares each value); iterate to drive the loop.

        With ``book`` (a run's, bound to its shard), a :class:`~shardwise.model.recorded.Recorded` model is
        given each window's :class:`~shardwise.model.recorded.WindowRef`, so the provider batches it
        submits are recorded and found again (see :mod:`shardwise.model.recorded`).
        """
        return EngineRun(self, rows, on_batch, book)


class EngineRun(Closing):
    """One pass over the input. Iterate it once for :class:`RowResult` s in input order.

    :attr:`stats` fills in as the run goes and is final once iteration ends.
    Use it as a context manager (or call :meth:`close`) when you may stop
    early, so the prefetch thread is stopped at once.
    """

    def __init__(
        self,
        engine: Engine,
        rows: Iterable[Row],
        on_batch: Callable[[BatchStats], None] | None,
        book: BatchBook | None = None,
    ) -> None:
        self.stats = EngineStats()
        self._engine = engine
        self._on_batch = on_batch
        self._book = book
        self._counted = count_columns(engine.model.outputs)
        model = engine.model
        self._results = (
            self._self_batched(rows, model) if isinstance(model, SelfBatching) else self._loop(rows)
        )

    def __iter__(self) -> Iterator[RowResult]:
        return self._results

    def close(self) -> None:
        self._results.close()

    def _loop(self, rows: Iterable[Row]) -> Generator[RowResult, None, None]:
        model, cfg = self._engine.model, self._engine.config
        assert not isinstance(model, SelfBatching)  # the self-batched loop takes those
        assert cfg.max_tokens and cfg.max_batch_size and cfg.pad_to_multiple  # filled by for_device
        assert cfg.precision != "auto"  # resolved by for_device
        budget = CostBudget(cfg.max_tokens)
        forward = Forward(model, budget, cfg.pad_to_multiple, cfg.precision)
        batches = produce_batches(
            rows,
            model,
            window_rows=cfg.window_rows,
            budget=budget,
            max_batch_size=cfg.max_batch_size,
            pad_to_multiple=cfg.pad_to_multiple,
            pad_slack=cfg.pad_slack,
        )
        assembler = _Assembler()
        started = time.perf_counter()
        try:
            with Prefetcher(batches, model.device, cfg.prefetch_depth) as prefetcher, torch.inference_mode():
                for batch, waited in prefetcher:
                    assembler.open(batch.window)
                    if batch.positions:
                        self._score(batch, waited, forward, assembler)
                    for result in assembler.pop_complete():
                        self._count(result)
                        yield result
        finally:
            self.stats.wall_s = time.perf_counter() - started

    def _self_batched(self, rows: Iterable[Row], model: SelfBatching) -> Generator[RowResult, None, None]:
        """The loop of a model that batches by itself: a window of values at a time, given to it whole;
        a value the source already refused (an :class:`InputError`) is not given and stays a dead letter."""
        it, started, position = iter(rows), time.perf_counter(), 0
        try:
            while window := list(islice(it, self._engine.config.window_rows)):
                asked = [i for i, (_, value) in enumerate(window) if not isinstance(value, InputError)]
                scored = time.perf_counter()
                outcomes = self._ask(model, [window[i] for i in asked], position) if asked else []
                position += len(window)
                if len(outcomes) != len(asked):
                    raise ShardwiseError(
                        f"model {model.name!r} gave {len(outcomes)} outcomes for {len(asked)} rows; a "
                        "self-batching model gives one per value, in input order"
                    )
                by_row: dict[int, Mapping[str, Any] | InputError] = dict(zip(asked, outcomes, strict=True))
                results = [_outcome(key, by_row.get(i, value)) for i, (key, value) in enumerate(window)]
                ok = [r.values for r in results if r.values is not None]
                stats = BatchStats(  # costs are the model's own business: none is counted here
                    rows=len(asked),
                    real_tokens=0,
                    padded_tokens=0,
                    wait_s=0.0,
                    compute_s=time.perf_counter() - scored,
                    counts=counts_of_rows(ok, self._counted),
                )
                self.stats.add(stats)
                if self._on_batch is not None:
                    self._on_batch(stats)
                for result in results:
                    self._count(result)
                    yield result
        finally:
            self.stats.wall_s = time.perf_counter() - started

    def _ask(
        self, model: SelfBatching, rows: list[Row], position: int
    ) -> Sequence[Mapping[str, Any] | InputError]:
        """The model's outcomes for a window's rows: with a book, a recording model gets the window's
        identity too (its keys, where it starts); every other model just the values."""
        values = [value for _, value in rows]
        if self._book is not None and isinstance(model, Recorded):
            window = WindowRef(position, tuple(str(key) for key, _ in rows), self._book)
            return model.score_recorded(values, window)
        return model.score_window(values)

    def _score(self, batch: Batch, waited: float, forward: Forward, assembler: _Assembler) -> None:
        assert batch.inputs is not None
        splits_before = forward.oom_splits
        started = time.perf_counter()
        columns = forward(batch.items, batch.inputs)
        computed = time.perf_counter() - started
        assembler.fill(batch.window, batch.positions, columns)
        stats = BatchStats(
            rows=len(batch.positions),
            real_tokens=batch.real_cost,
            padded_tokens=batch.padded_cost,
            wait_s=waited,
            compute_s=computed,
            oom_splits=forward.oom_splits - splits_before,
            counts=counts_of_columns(columns, self._counted),
        )
        self.stats.add(stats)
        if self._on_batch is not None:
            self._on_batch(stats)

    def _count(self, result: RowResult) -> None:
        self.stats.rows += 1
        self.stats.rows_failed += not result.ok
        self.stats.rows_truncated += result.truncated


def _outcome(key: Hashable, outcome: object) -> RowResult:
    """One row's result from a self-batching model's outcome (or the source's refusal of its value)."""
    if isinstance(outcome, InputError):
        return RowResult(key, None, error=outcome)
    assert isinstance(outcome, Mapping)
    return RowResult(key, dict(outcome))


class _Assembler:
    """Collects batch outputs per window and releases whole windows in input order.

    A row the model rejected after running it (:data:`~shardwise.model.REJECTED`) comes out with its
    error and no values, as a row it refused to prepare does.
    """

    def __init__(self) -> None:
        self._windows: dict[int, tuple[Window, list[Mapping[str, Any] | None]]] = {}
        self._filled: dict[int, int] = {}
        self._rejected: dict[int, dict[int, InputError]] = {}

    def open(self, window: Window) -> None:
        if window.index not in self._windows:
            self._windows[window.index] = (window, [None] * len(window.keys))
            self._filled[window.index] = 0
            self._rejected[window.index] = {}

    def fill(self, window: Window, positions: list[int], columns: Mapping[str, Any]) -> None:
        slots = self._windows[window.index][1]
        rejected = columns.get(REJECTED)
        values = {name: column for name, column in columns.items() if name != REJECTED}
        for row, position in enumerate(positions):
            error = None if rejected is None else rejected[row]
            if error is not None:
                self._rejected[window.index][position] = error
            else:
                slots[position] = {name: column[row] for name, column in values.items()}
        self._filled[window.index] += len(positions)

    def pop_complete(self) -> Iterator[RowResult]:
        # Windows finish in order: the producer emits every batch of one window
        # before the first batch of the next.
        for index in sorted(self._windows):
            window, slots = self._windows[index]
            if self._filled[index] < window.valid_rows:
                return
            rejected = self._rejected.pop(index)
            del self._windows[index], self._filled[index]
            for position, key in enumerate(window.keys):
                error = window.errors.get(position) or rejected.get(position)
                yield RowResult(key, slots[position], window.truncated[position], error)
