"""How a chunk's cost is priced: device time for a local model, tokens for a remote one.

A local model's cost is the device time it held: seconds times the price per
device-hour an operator sets (``--device-price-per-hour``); with none set a
run's device-hours are known and its dollars are not (None). A remote
model's cost is its tokens at its provider's prices, from the
``genai-prices`` package's bundled table (its data ships with the package;
shardwise never starts its updater, so nothing is fetched): prompt tokens at
the input price, the cached share of them at the cache-read price where the
provider has one, completion tokens at the output price, and, for a run
through a provider's Batch API, the batch prices; each row is priced as the
one request it was, so a price tier for long prompts applies as the provider
bills it. A remote model the table
does not know (a self-hosted OpenAI-compatible server's) has no price: None.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from shardwise.errors import ConfigError
from shardwise.model.kinds import claiming

__all__ = ["Pricing", "remote_model", "token_cost"]


def remote_model(model_name: str) -> tuple[str, str] | None:
    """``("openai", "gpt-4o-mini")`` for ``openai:gpt-4o-mini``: the provider and model a remote model
    name prices by (its model kind says: :meth:`~shardwise.model.kinds.ModelKind.priced_as`); None for a
    local model."""
    kind = claiming(model_name)
    return None if kind is None else kind.priced_as(model_name)


@dataclass(frozen=True)
class Pricing:
    """How a run prices its chunks: ``model_name``'s tokens when it is a remote model the price table
    knows, else ``device_per_hour`` dollars per hour of device time (None: not priced).

    ``batch``: the remote model is called through its provider's Batch API, at batch prices."""

    model_name: str = ""
    device_per_hour: float | None = None
    batch: bool = False

    def __post_init__(self) -> None:
        price = self.device_per_hour
        if price is not None and (
            isinstance(price, bool)
            or not isinstance(price, (int, float))
            or not math.isfinite(price)
            or price < 0
        ):
            raise ConfigError(
                f"the price per device-hour must be a number of dollars, 0 or more; got {price!r} (give "
                "--device-price-per-hour 2.5, or leave it unset to see device-hours without dollars)"
            )

    @property
    def remote(self) -> tuple[str, str] | None:
        return remote_model(self.model_name)

    @property
    def priced(self) -> bool:
        """Whether chunks get a cost: a remote model the table knows, or a local one with a device price."""
        if self.remote is not None:
            return _known(*self.remote)
        return self.device_per_hour is not None

    def cost(self, rows: Iterable[Mapping[str, int]], device_s: float) -> float | None:
        """The dollars of a chunk whose scored rows counted ``rows`` (each row's count outputs) and that
        held its device ``device_s`` seconds. A remote model's rows are priced one by one: each was
        one request, and a provider's price tiers (a long prompt's) apply per request."""
        if self.remote is not None:
            if not self.priced:
                return None
            return sum(token_cost(self.model_name, row, batch=self.batch) or 0.0 for row in rows)
        if self.device_per_hour is None:
            return None
        return device_s * float(self.device_per_hour) / 3600.0

    def describe(self) -> str:
        """How the run is priced, in words, for the plan and the summary."""
        if self.remote is not None:
            provider, name = self.remote
            if not _known(provider, name):
                return f"no price known for {self.model_name} (not in the genai-prices table)"
            return f"{self.model_name} at genai-prices' {'batch ' if self.batch else ''}token prices"
        if self.device_per_hour is None:
            return "no price per device-hour set (--device-price-per-hour, SHARDWISE_DEVICE_PRICE_PER_HOUR)"
        return f"${self.device_per_hour:g} per device-hour"


def token_cost(model_name: str, counts: Mapping[str, int], *, batch: bool = False) -> float | None:
    """The dollars of one request of a remote model that counted ``counts`` (``prompt_tokens``, of them
    ``cached_tokens``, and ``completion_tokens``) at the price table's prices; None when the table does
    not know the model. Price requests one by one: a tier (a long prompt's price) applies per request."""
    found = remote_model(model_name)
    if found is None or not _known(*found):
        return None
    from genai_prices import Usage, calc_price  # imported on use: the table is a few MB of Python

    prompt, cached = int(counts.get("prompt_tokens", 0)), int(counts.get("cached_tokens", 0))
    usage = Usage(
        input_tokens=prompt,
        cache_read_tokens=min(cached, prompt) or None,  # a part of the prompt tokens, as providers count
        output_tokens=int(counts.get("completion_tokens", 0)),
    )
    context = {"processing": "batch"} if batch else None
    return float(calc_price(usage, found[1], provider_id=found[0], price_context=context).total_price)


@lru_cache(maxsize=64)
def _known(provider: str, name: str) -> bool:
    from genai_prices import Usage, calc_price

    try:
        calc_price(Usage(input_tokens=0, output_tokens=0), name, provider_id=provider)
    except LookupError:
        return False
    return True
