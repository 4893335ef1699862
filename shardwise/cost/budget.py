"""A run's budgets, in dollars and in tokens: its shards stop at a chunk boundary before the run passes one.

Before a shard's attempt scores a chunk (its first, and each after a
commit) it reserves the chunk in the ledger, in one transaction that locks
the run's row: the run's committed usage (every chunk of every shard,
this invocation's and earlier ones'), plus the chunks the other shards hold
in flight, plus this chunk, must stay within each budget given, or the
shard stops with :class:`~shardwise.errors.BudgetReached` and holds
nothing. A chunk is taken to cost what the run's committed chunks cost on
average; while nothing is committed that average is unknown, so the run's
first chunk is scored alone (the other shards wait for it, or for its
worker's lease to lapse). That first chunk is bounded before the run
starts: a budgeted run's chunks are sized from the plan's high estimate of
a row's cost (:func:`chunk_rows_within`: earlier runs, a calibration pass,
counted tokens at the price) to a :data:`SHARE` of the budget, and recorded
with its plan, so a resume cuts the same chunks; a budget the plan cannot
size a chunk for (a cost unknown, one row past the share) is refused. The
workers so share what is in flight, and the run passes a budget by no more
than the estimates' error: what the chunks in flight use beyond the
average; a run that ends past it says so (:func:`past_budget`). Everything
committed stays, and ``--resume`` with a larger budget goes on after it, so
the finished results are exactly those of a run without a budget.

Tokens are prompt plus completion tokens, as the chunk marks record them
(:data:`~shardwise.cost.usage.TOKEN_COUNTS`); a token budget needs no price.
A model that counts no tokens (an encoder, an image model) is refused a
token budget before the run starts (:func:`check_counts_tokens`): nothing
would ever stop it, and a budget that cannot bind is a mistake, not a
setting. A dollar budget bounds such a run, given a price per device-hour.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from shardwise.cost.usage import TOKEN_COUNTS, RunUsage, dollars
from shardwise.errors import BudgetReached, ConfigError

__all__ = [
    "Budget",
    "BudgetGuard",
    "Hold",
    "check_budget",
    "check_counts_tokens",
    "check_token_budget",
    "chunk_rows_within",
    "decide",
    "past_budget",
]

SHARE = 10
"""A budgeted run's chunk is sized so that, at the plan's high estimate, it spends at most this share
(one tenth) of each budget given: the first chunk, scored before anything is measured, included."""

WAIT_S = 0.5
"""How often a shard waiting for the run's first chunk looks again whether it was committed."""


def chunk_rows_within(
    budget: Budget, row_usd: float | None, row_tokens: int | None, rows: int, why: str
) -> int:
    """The rows of a chunk of a run under ``budget`` that spends at most a :data:`SHARE` of each budget
    given, a row taken to cost ``row_usd`` dollars and ``row_tokens`` tokens at most (the plan's high
    estimate; None: unknown, ``why`` says why); ``rows`` at most (the model's chunk). A
    :class:`ConfigError` when the plan cannot size it (a cost unknown), or one row alone passes the share."""
    fits = rows
    for given, per_row, flag in (
        (budget.usd, row_usd, "--budget-usd"),
        (budget.tokens, row_tokens, "--budget-tokens"),
    ):
        if given is None:
            continue
        if per_row is None:
            raise ConfigError(
                f"{flag} {given:g} needs what a row costs, to size the first chunk to a tenth of it, and "
                f"the plan does not know: {why}; score a few rows without a budget first (shardwise run "
                "... --where), so the ledger knows this model's cost, or give --budget-tokens instead"
            )
        share = given / SHARE
        if per_row > share:
            said = dollars(per_row) if flag == "--budget-usd" else f"{per_row:,} tokens"
            raise ConfigError(
                f"{flag} {given:g} cannot hold even one row to a tenth of it: a row may cost up to {said} "
                f"(the plan's high estimate); give {flag} {_round_up(per_row * SHARE)} or more"
            )
        if per_row > 0:
            fits = min(fits, int(share // per_row))
    return max(1, fits)


def _round_up(value: float) -> str:
    """``value`` rounded up to three significant digits, as a flag takes it: ``0.0431``, ``1250``."""
    if value >= 100:
        return str(math.ceil(round(value, 6)))
    places = 2 - math.floor(math.log10(value))
    scaled = math.ceil(round(value * 10**places, 6))  # 0.0021000000000000003 is 0.0021, not 0.00211
    return f"{scaled / 10**places:.{places}f}".rstrip("0").rstrip(".")


def past_budget(budget: Budget | None, usage: RunUsage) -> str | None:
    """``past its budget: $0.0918 spent of the $0.01 budget``, naming each budget the run's usage passed;
    None when it passed none (or had no budget)."""
    if budget is None:
        return None
    over = []
    if budget.usd is not None and (usage.cost_usd or 0.0) > budget.usd:
        over.append(f"{dollars(usage.cost_usd)} spent of the {dollars(budget.usd)} budget")
    if budget.tokens is not None and usage.tokens > budget.tokens:
        over.append(f"{usage.tokens:,} tokens spent of the {budget.tokens:,}-token budget")
    return f"past its budget: {' and '.join(over)}" if over else None


def check_budget(budget_usd: float | None) -> None:
    """A dollar budget is a number of dollars above 0, or None (no budget)."""
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


def check_token_budget(budget_tokens: int | None) -> None:
    """A token budget is a whole number of tokens above 0, or None (no budget)."""
    if budget_tokens is None:
        return
    if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) or budget_tokens <= 0:
        raise ConfigError(
            f"the token budget must be a whole number of tokens above 0; got {budget_tokens!r} "
            "(give --budget-tokens 100000)"
        )


def check_counts_tokens(model: str, counted: Iterable[str], budget_tokens: int | None) -> None:
    """A token budget needs a model that counts tokens (``counted``: its count outputs), or it is refused."""
    if budget_tokens is None or set(TOKEN_COUNTS) & set(counted):
        return
    raise ConfigError(
        f"--budget-tokens {budget_tokens} needs a model that counts its tokens, and model {model!r} counts "
        "none (an encoder or image model records no prompt or completion tokens); drop --budget-tokens, "
        "or bound the run with --budget-usd and a price per device-hour"
    )


@dataclass(frozen=True)
class Budget:
    """What a run may spend: ``usd`` dollars, ``tokens`` tokens (prompt plus completion), or both."""

    usd: float | None = None
    tokens: int | None = None

    def __post_init__(self) -> None:
        check_budget(self.usd)
        check_token_budget(self.tokens)
        if self.usd is None and self.tokens is None:
            raise ConfigError("a budget needs dollars, tokens or both; got neither (give --budget-usd 5)")

    @classmethod
    def of(cls, usd: float | None, tokens: int | None) -> Budget | None:
        """The budget of a run given these limits; None when neither is given."""
        return None if usd is None and tokens is None else cls(usd, tokens)


@dataclass(frozen=True)
class Hold:
    """A chunk in flight, at its estimate: ``cost_usd`` dollars and ``tokens`` tokens."""

    cost_usd: float = 0.0
    tokens: int = 0


def decide(budget: Budget, committed: RunUsage, others: Sequence[Hold]) -> Hold | None:
    """The hold of the next chunk, if it fits ``budget`` beside the ``committed`` usage and the ``others``
    in flight; None to wait (nothing is committed yet, so no chunk has an estimate, and another shard's
    chunk is in flight); :class:`BudgetReached` when it would pass the budget."""
    priced = committed.chunks - committed.unpriced
    if not committed.chunks and others:
        return None
    spent = committed.cost_usd or 0.0
    estimate = Hold(
        spent / priced if priced else 0.0,
        math.ceil(committed.tokens / committed.chunks) if committed.chunks else 0,
    )
    held_usd = spent + sum(h.cost_usd for h in others)
    held_tokens = committed.tokens + sum(h.tokens for h in others)
    if budget.usd is not None and (held_usd >= budget.usd or held_usd + estimate.cost_usd > budget.usd):
        raise BudgetReached(
            f"stopped: budget: {dollars(spent)} spent and {dollars(held_usd - spent)} in flight of the "
            f"{dollars(budget.usd)} budget, and the next chunk (about {dollars(estimate.cost_usd)}) would "
            "pass it"
        )
    if budget.tokens is not None and (
        held_tokens >= budget.tokens or held_tokens + estimate.tokens > budget.tokens
    ):
        raise BudgetReached(
            f"stopped: budget: {committed.tokens:,} tokens spent and {held_tokens - committed.tokens:,} in "
            f"flight of the {budget.tokens:,}-token budget, and the next chunk (about {estimate.tokens:,}) "
            "would pass it"
        )
    return estimate


Reserve = Callable[[int, Callable[[RunUsage, Sequence[Hold]], Hold | None]], bool]
"""Reserve chunk ``n`` of a shard's attempt in the ledger: in one transaction, read the run's committed
usage and the other shards' live holds, call the decision with them, and record the hold it returns;
False, recording nothing, when it returns None."""


class BudgetGuard:
    """Reserves each chunk of one shard attempt against the run's ``budget`` through ``reserve``."""

    def __init__(self, budget: Budget, reserve: Reserve, sleep: Callable[[float], None] = time.sleep) -> None:
        self.budget, self._reserve, self._sleep = budget, reserve, sleep

    def check(self, chunk: int) -> None:
        """Hold chunk ``chunk`` before it is scored, waiting while the run's first chunk is in flight
        elsewhere; :class:`BudgetReached` when it would take the run past its budget."""
        while not self._reserve(chunk, lambda usage, others: decide(self.budget, usage, others)):
            self._sleep(WAIT_S)
