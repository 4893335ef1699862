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
  such run, from a calibration pass that the precision guard measured and
  cached on this host for the model, its version, the run's device and
  precision (:class:`~shardwise.precision.calibration.Speed`: the calibration
  batch's cost, tokens or pixels, per second), over the planned rows' cost
  (prompt plus at most ``max_new_tokens`` a row for a generator): about that
  compute time, from half of it (one small batch, its first pass cold, is
  no exact measure) to :data:`_CALIBRATED_SLOWER` times it (a run also
  prepares, pads, commits and waits). A plan never runs a pass itself (the
  guard is a run's, and a plan writes nothing); with neither, device-hours
  are unknown (None), and so are a local model's dollars. Which source gave
  the figure is said (``device_hours_from``).
* **Dollars** follow: device-hours at the price per device-hour, or a remote
  model's tokens at the price table's prices, from the low end (every prompt
  token a cache hit, nothing generated) to the high (no cache hit, every row
  generating ``max_new_tokens``).

A model that batches by itself is not loaded by a plan (no engine is built,
no endpoint asked); its spec's :class:`~shardwise.model.PromptCounter`
counts its prompts instead:

* **vLLM** renders and tokenizes a row's prompt with the model's own
  tokenizer and chat template, the very code its generator sends token ids
  from (:func:`models.vllm.generator.vllm_prompts`): the count is
  exact, as the ``hf`` engine's.
* **A remote endpoint**'s tokenizer is the server's. An operator who holds
  it names its folder (the endpoint option ``tokenizer``, ``--tokenizer``),
  and the prompts are rendered and counted as an OpenAI-compatible server
  renders them (chat template, or system text and prompt joined by a blank
  line). Without it (operators rarely hold one; a hosted model's is not
  published) the tokens are *estimated*, by the rule its requests' token
  budget already reserves by (4 characters a token over the system text and
  the prompt, plus one; the chat framing the server adds is not in it).
  Either way the plan labels the count "estimated (...)" with the tokenizer
  or rule: the server's count may differ, so the dollar range that follows
  is an estimate too, not a bound; completion tokens stay bounded by
  ``max_new_tokens``.

A model that batches by itself with no counter (a remote embedding model)
has its tokens unknown (None), and the plan says so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from itertools import islice

from shardwise.cost.prices import Pricing, token_cost
from shardwise.cost.usage import NO_DEVICE
from shardwise.errors import InputError
from shardwise.model import Item, Loaded, Model, PromptCounter, PromptItem
from shardwise.precision.calibration import Speed
from shardwise.results.outcomes import RunListing
from shardwise.sources import Source, SourcePlan

__all__ = [
    "EXACT_ROWS",
    "NO_DEVICE_HOURS",
    "CostEstimate",
    "TokenCount",
    "count_tokens",
    "estimate_cost",
    "row_high",
]

EXACT_ROWS = 100_000
"""Planned rows up to which every row is tokenized (an exact count); a larger table is sampled."""
_SAMPLE_SHARDS = 4
_SAMPLE_ROWS = 64
_SLOWER, _FASTER = 2.0, 0.5
"""The device-hours range around earlier runs' seconds per row: their slowest twice, their fastest half."""
_CALIBRATED_SLOWER = 4.0
"""The device-hours range from a calibration pass: half its compute time, to this many times it."""


@dataclass(frozen=True)
class TokenCount:
    """The planned rows' prompt tokens, counted (``sampled`` False: every row) or scaled from a sample.

    ``per_row`` holds each counted row's prompt tokens (the rows the model would score);
    ``max_new_tokens`` is a generator's cap per row (None for a model that generates nothing);
    ``estimated`` the rule the tokens are estimated by (None: counted with the model's tokenizer)."""

    rows: int
    counted_rows: int
    per_row: Sequence[int]
    max_new_tokens: int | None
    sampled: bool
    estimated: str | None = None

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

    @property
    def cost(self) -> int:
        """The rows' cost in the model's unit (its items' ``cost``: tokens, pixels; a generator's prompt
        plus at most ``max_new_tokens``), as a calibration pass's speed counts it."""
        return self.prompt_tokens + (self.max_completion_tokens or 0)

    def describe(self) -> str:
        """``exact: every one of 300 rows tokenized``, or ``estimated from a sample of 256 of 1,000 rows``;
        a count without the model's tokenizer starts ``estimated (no tokenizer: RULE)``."""
        if self.estimated is not None:
            over = f"a sample of {self.counted_rows:,} of" if self.sampled else "every one of"
            return f"estimated ({self.estimated}) over {over} {self.rows:,} rows"
        if self.sampled:
            return f"estimated from a sample of {self.counted_rows:,} of {self.rows:,} rows"
        return f"exact: every one of {self.rows:,} rows tokenized"


def count_tokens(
    source: Source, plan: SourcePlan, model: Loaded | PromptCounter | None, exact_up_to: int | None = None
) -> TokenCount | None:
    """Count the planned rows' prompt tokens with the model's ``prepare`` (or the prompt counter of a
    model that batches by itself), as the run will, every row up to ``exact_up_to`` planned rows (default
    :data:`EXACT_ROWS`); None for a model that batches by itself and has no counter."""
    prepare: Callable[[object], Item | PromptItem]
    if isinstance(model, Model):
        prepare, estimated = model.prepare, None
    elif isinstance(model, PromptCounter):
        prepare, estimated = model.prompt, model.estimated
    else:
        return None
    sampled = plan.expected_rows > (EXACT_ROWS if exact_up_to is None else exact_up_to)
    per_row: list[int] = []
    counted, cap = 0, None
    for value in _values(source, plan, sampled):
        counted += 1
        try:
            item = prepare(value)
        except InputError:
            continue  # a dead letter: the run counts no tokens for it
        if isinstance(item, PromptItem):
            per_row.append(item.prompt_tokens)
            cap = item.max_new_tokens
        else:
            per_row.append(item.cost)
    rows = plan.expected_rows if sampled else counted
    return TokenCount(rows, counted, per_row, cap, sampled, estimated)


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
    hours_from: str = ""
    """Where the device-hours come from: ``3 earlier runs``, ``a calibration pass on 2026-12-06``, or
    ``unknown: ...``, or :data:`REMOTE_DEVICE_HOURS`."""


NO_DEVICE_HOURS = "unknown: no earlier run of this model in this ledger, and no calibration pass cached"


def estimate_cost(
    tokens: TokenCount | None, pricing: Pricing, earlier: Sequence[RunListing], speed: Speed | None = None
) -> CostEstimate:
    """The run's device-hours from ``earlier`` runs (those of the same model, with recorded usage), else from
    ``speed`` (a cached calibration pass for the run's model, device and precision), and its dollars under
    ``pricing``; see the module docstring."""
    if pricing.remote is not None:
        return _remote(tokens, pricing)
    rates = [
        run.usage.device_seconds / run.usage.rows
        for run in earlier
        if run.model_name == pricing.model_name and run.usage.rows and run.usage.device_s
    ]
    if tokens is None or (not rates and speed is None):
        return CostEstimate(basis=f"device-hours {NO_DEVICE_HOURS}", hours_from=NO_DEVICE_HOURS)
    rows = tokens.rows
    if rates:
        hours = rows * statistics.fmean(rates) / 3600
        low, high = rows * min(rates) * _FASTER / 3600, rows * max(rates) * _SLOWER / 3600
        source = f"{len(rates)} earlier run{'s' if len(rates) > 1 else ''}"
        rule = (
            f"{source} of this model in this ledger (half the fastest to twice the slowest seconds per row)"
        )
    else:
        assert speed is not None
        hours = tokens.cost / speed.cost_per_s / 3600
        low, high = hours * _FASTER, hours * _CALIBRATED_SLOWER
        day = datetime.fromtimestamp(speed.measured_at, timezone.utc).date().isoformat()
        source = f"a calibration pass on {day}"
        rule = (
            f"{source} ({speed.cost_per_s:,.0f} tokens or pixels a second on this device and precision, over "
            f"the planned rows' {tokens.cost:,}; half that compute time to {_CALIBRATED_SLOWER:g} times it)"
        )
    basis = f"device-hours from {rule}; {pricing.describe()}"
    price = pricing.device_per_hour
    if price is None:
        return CostEstimate(hours, low, high, basis=basis, hours_from=source)
    return CostEstimate(hours, low, high, low * price, high * price, basis, source)


def row_high(tokens: TokenCount | None, cost: CostEstimate) -> tuple[float | None, int | None]:
    """A row's cost at the high end of the estimate, spread over the planned rows: dollars and tokens
    (prompt plus ``max_new_tokens``, rounded up); None where the plan does not know."""
    if tokens is None:
        return None, None
    if not tokens.rows:
        return 0.0, 0
    usd = None if cost.cost_usd_high is None else cost.cost_usd_high / tokens.rows
    return usd, math.ceil(tokens.cost / max(1, tokens.scored_rows))  # the rows it would score


REMOTE_DEVICE_HOURS = NO_DEVICE


def _remote(tokens: TokenCount | None, pricing: Pricing) -> CostEstimate:
    if tokens is None:
        basis = f"{pricing.describe()}; its prompt tokens are not counted before a run"
        return CostEstimate(basis=basis, hours_from=REMOTE_DEVICE_HOURS)
    if not pricing.priced:
        return CostEstimate(basis=pricing.describe(), hours_from=REMOTE_DEVICE_HOURS)
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
    basis = pricing.describe()
    if tokens.estimated is not None:
        basis += f"; over prompt tokens estimated ({tokens.estimated}): an estimate, not a bound"
    return CostEstimate(None, None, None, low * scale, high * scale, basis, REMOTE_DEVICE_HOURS)
