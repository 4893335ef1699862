"""What a run will cost, estimated before it runs (``shardwise plan``): its tokens, device-hours and dollars.

* **Prompt tokens** are counted with the model's own ``prepare``, the
  tokenizer and prompt template the run will use, over every planned row
  when there are at most :data:`EXACT_ROWS` of them: the count is then exact
  (rows the model refuses are dead letters, which the run counts no tokens
  for). A larger table is sampled (the first rows of a few evenly spaced
  shards) and scaled to its rows, and the estimate says so.
* **Completion tokens** are bounded: at most ``max_new_tokens`` a row.
* **Device-hours** of a local model come from earlier runs of the same model
  in the same ledger (their device seconds per row, as their chunks recorded
  them): the range is half the fastest to twice the slowest of them. With no
  such run they are unknown (None), and so are a local model's dollars.
* **Dollars** follow: device-hours at the price per device-hour, or a remote
  model's tokens at the price table's prices, from the low end (every prompt
  token a cache hit, nothing generated) to the high (no cache hit, every row
  generating ``max_new_tokens``).

A model that batches by itself (a remote model, vLLM) prepares no rows here:
its tokens are not counted (None), and the plan says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

from shardwise.cost.prices import Pricing, token_cost
from shardwise.errors import InputError
from shardwise.model import Loaded, PromptItem, SelfBatching
from shardwise.results.outcomes import RunListing
from shardwise.sources import Source, SourcePlan

__all__ = ["EXACT_ROWS", "CostEstimate", "TokenCount", "count_tokens", "estimate_cost"]

EXACT_ROWS = 100_000
"""Planned rows up to which every row is tokenized (an exact count); a larger table is sampled."""
_SAMPLE_SHARDS = 4
_SAMPLE_ROWS = 64
_SLOWER, _FASTER = 2.0, 0.5
"""The device-hours range around earlier runs' seconds per row: their slowest twice, their fastest half."""


@dataclass(frozen=True)
class TokenCount:
    """The planned rows' prompt tokens, counted (``sampled`` False: every row) or scaled from a sample.

    ``per_row`` holds each counted row's prompt tokens (the rows the model would score);
    ``max_new_tokens`` is a generator's cap per row (None for a model that generates nothing)."""

    rows: int
    counted_rows: int
    per_row: Sequence[int]
    max_new_tokens: int | None
    sampled: bool

    @property
    def scored_rows(self) -> int:
        """The rows the run would score (not refuse), scaled to the plan when sampled."""
        if not self.counted_rows:
            return 0
        return round(len(self.per_row) * self.rows / self.counted_rows)

    @property
    def prompt_tokens(self) -> int:
        if not self.counted_rows:
            return 0
        return round(sum(self.per_row) * self.rows / self.counted_rows)

    @property
    def max_completion_tokens(self) -> int | None:
        return None if self.max_new_tokens is None else self.scored_rows * self.max_new_tokens

    def describe(self) -> str:
        """``exact: every one of 300 rows tokenized``, or ``estimated from a sample of 256 of 1,000 rows``."""
        if self.sampled:
            return f"estimated from a sample of {self.counted_rows:,} of {self.rows:,} rows"
        return f"exact: every one of {self.rows:,} rows tokenized"


def count_tokens(
    source: Source, plan: SourcePlan, model: Loaded, exact_up_to: int | None = None
) -> TokenCount | None:
    """Count the planned rows' prompt tokens with the model's ``prepare``, as the run will, every row up to
    ``exact_up_to`` planned rows (default :data:`EXACT_ROWS`); None for a model that batches by itself
    (nothing is prepared here)."""
    if isinstance(model, SelfBatching):
        return None
    sampled = plan.expected_rows > (EXACT_ROWS if exact_up_to is None else exact_up_to)
    per_row: list[int] = []
    counted, cap = 0, None
    for value in _values(source, plan, sampled):
        counted += 1
        try:
            item = model.prepare(value)
        except InputError:
            continue  # a dead letter: the run counts no tokens for it
        if isinstance(item, PromptItem):
            per_row.append(item.prompt_tokens)
            cap = item.max_new_tokens
        else:
            per_row.append(item.cost)
    rows = plan.expected_rows if sampled else counted
    return TokenCount(rows, counted, per_row, cap, sampled)


def _values(source: Source, plan: SourcePlan, sampled: bool) -> Iterator[object]:
    shards = plan.shards
    if sampled:
        step = max(1, len(shards) // _SAMPLE_SHARDS)
        shards = shards[::step][:_SAMPLE_SHARDS]
    for shard in shards:
        with source.open_reader(plan, shard) as reader:
            rows = islice(reader.rows, _SAMPLE_ROWS) if sampled else reader.rows
            for row in rows:
                yield row.value


@dataclass(frozen=True)
class CostEstimate:
    """The planned run's device-hours (None: unknown) and dollar range (None: not priced or unknown)."""

    device_hours: float | None = None
    device_hours_low: float | None = None
    device_hours_high: float | None = None
    cost_usd_low: float | None = None
    cost_usd_high: float | None = None
    basis: str = ""
    """Where the figures come from, in words."""


def estimate_cost(tokens: TokenCount | None, pricing: Pricing, earlier: Sequence[RunListing]) -> CostEstimate:
    """The run's device-hours from ``earlier`` runs (those of the same model, with recorded usage), and its
    dollars under ``pricing``; see the module docstring."""
    if pricing.remote is not None:
        return _remote(tokens, pricing)
    rates = [
        run.usage.device_seconds / run.usage.rows
        for run in earlier
        if run.model_name == pricing.model_name and run.usage.rows and run.usage.device_s
    ]
    rows = 0 if tokens is None else tokens.rows
    if not rates or tokens is None:
        return CostEstimate(basis="device-hours unknown: no earlier run of this model in this ledger")
    hours = rows * statistics.fmean(rates) / 3600
    low, high = rows * min(rates) * _FASTER / 3600, rows * max(rates) * _SLOWER / 3600
    basis = (
        f"device-hours from {len(rates)} earlier run(s) of this model in this ledger (half the fastest "
        f"to twice the slowest seconds per row); {pricing.describe()}"
    )
    price = pricing.device_per_hour
    if price is None:
        return CostEstimate(hours, low, high, basis=basis)
    return CostEstimate(hours, low, high, low * price, high * price, basis)


def _remote(tokens: TokenCount | None, pricing: Pricing) -> CostEstimate:
    if tokens is None or not pricing.priced:
        return CostEstimate(basis=f"{pricing.describe()}; its prompt tokens are not counted before a run")
    cap = tokens.max_new_tokens or 0
    scale = tokens.rows / tokens.counted_rows if tokens.counted_rows else 0.0
    low = sum(
        token_cost(pricing.model_name, {"prompt_tokens": p, "cached_tokens": p}, batch=pricing.batch) or 0.0
        for p in tokens.per_row
    )
    high = sum(
        token_cost(pricing.model_name, {"prompt_tokens": p, "completion_tokens": cap}, batch=pricing.batch)
        or 0.0
        for p in tokens.per_row
    )
    return CostEstimate(None, None, None, low * scale, high * scale, pricing.describe())
