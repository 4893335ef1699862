"""A run's dollar budget: its shards stop at a chunk boundary before the run's cost would pass it.

A shard checks after it commits each chunk, and before it scores its first:
the run's committed cost (every chunk of every shard in the ledger, this
invocation's and earlier ones') plus the next chunk's, taken to cost what the
run's committed chunks cost on average, must stay within the budget, or the
shard stops with :class:`~shardwise.errors.BudgetReached`. Everything
committed stays, and ``--resume`` with a larger budget goes on after it, so
the finished results are exactly those of a run without a budget. Each
worker counts one chunk in flight, its own: ``n`` workers may pass the budget
by at most ``n - 1`` chunks' cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from shardwise.cost.usage import RunUsage, dollars
from shardwise.errors import BudgetReached, ConfigError

__all__ = ["BudgetGuard", "check_budget"]


def check_budget(budget_usd: float | None) -> None:
    """A budget is a number of dollars above 0, or None (no budget)."""
    if budget_usd is None:
        return
    if (
        isinstance(budget_usd, bool)
        or not isinstance(budget_usd, (int, float))
        or not (math.isfinite(budget_usd) and budget_usd > 0)
    ):
        raise ConfigError(
            f"the budget must be a number of dollars above 0; got {budget_usd!r} (give --budget-usd 5)"
        )


class BudgetGuard:
    """Stops a shard before the run's committed cost plus one more chunk would pass ``budget_usd``;
    ``committed`` reads the run's usage from the ledger."""

    def __init__(self, budget_usd: float, committed: Callable[[], RunUsage]) -> None:
        check_budget(budget_usd)
        self.budget_usd, self._committed = float(budget_usd), committed

    def check(self) -> None:
        """Raise :class:`BudgetReached` when the next chunk would take the run past its budget."""
        usage = self._committed()
        spent = usage.cost_usd or 0.0
        priced = usage.chunks - usage.unpriced
        next_chunk = spent / priced if priced else 0.0
        if spent + next_chunk > self.budget_usd or spent >= self.budget_usd:
            raise BudgetReached(
                f"stopped: budget: {dollars(spent)} spent of the {dollars(self.budget_usd)} budget, and the "
                f"next chunk (about {dollars(next_chunk)}) would pass it"
            )
