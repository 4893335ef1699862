"""The operator's price per device-hour: given, or from the environment of the process that runs the flow.

Read here, in the flow layer: the engine reads no environment, and gets the
price inside the run's spec (:attr:`~shardwise.pipeline.spec.RunSettings.device_price_per_hour`).
"""

from __future__ import annotations

import math
import os

from shardwise.cost.prices import Pricing
from shardwise.errors import ConfigError

__all__ = ["DEVICE_PRICE_ENV", "check_priced", "device_price_per_hour"]

DEVICE_PRICE_ENV = "SHARDWISE_DEVICE_PRICE_PER_HOUR"
"""Dollars per device-hour when ``--device-price-per-hour`` is not given."""


def device_price_per_hour(given: float | None) -> float | None:
    """``given``, else the environment's price; None when neither is set (dollars are then not shown)."""
    if given is not None:
        return float(given)
    found = os.environ.get(DEVICE_PRICE_ENV, "").strip()
    if not found:
        return None
    try:
        price = float(found)
    except ValueError:
        price = math.nan
    if not math.isfinite(price) or price < 0:
        raise ConfigError(
            f"{DEVICE_PRICE_ENV}={found!r} is not a price per device-hour; set it to a number of dollars, "
            "0 or more (export SHARDWISE_DEVICE_PRICE_PER_HOUR=2.5), or unset it"
        )
    return price


def check_priced(model: str, price: float | None, budget_usd: float | None) -> None:
    """A budget needs a priced run: a price per device-hour for a local model, a remote model the price
    table knows; refused before anything runs."""
    if budget_usd is None or Pricing(model, price).priced:
        return
    raise ConfigError(
        f"--budget-usd {budget_usd:g} needs the run priced, and {Pricing(model, price).describe()}; give "
        f"--device-price-per-hour USD (or set {DEVICE_PRICE_ENV}), or drop --budget-usd"
    )
