"""How a run's summary states its totals, for the CLI's closing lines and the flow's log.

Two scopes, never mixed in one figure:

- **the whole run**: every chunk the run committed, whichever invocation
  scored it, as the ledger sums it when the run finishes (``rows_out``,
  ``rows_failed``, ``shards_done``, and a generator's token ``counts``), so a
  resumed run reports what an uninterrupted one would have;
- **this invocation**: what this command committed, the whole run's
  figures less what the run had already committed when this invocation took
  it (:class:`~shardwise.pipeline.run_result.InvocationCounts`).

A run started afresh has one scope, and its closing line is as it always
was, with the merge's new/updated/unchanged split. A resumed run's lines
label both scopes, and leave that split out: the merge counts a worker sees
are its shard's over all its chunks, earlier invocations' included, so they
fit neither scope. Rows skipped (a NULL key, already scored) are counted when
the run is planned, so they are the whole run's. A model that declares no count outputs (an encoder, a
classifier) states no tokens. The run's cost and device-hours are the whole
run's, summed from its committed chunks (:mod:`shardwise.cost`). The rates, this invocation's, are in the live
progress (``tasks/progress.py``).

The figures are a :class:`~shardwise.pipeline.run_result.RunResult`'s; the
whole run's are its ``totals``.
"""

from __future__ import annotations

from shardwise.cost.usage import dollars
from shardwise.errors import BudgetReached, SourceChangedError
from shardwise.model.counts import said
from shardwise.pipeline.run_result import RunResult
from shardwise.words import plural

__all__ = ["budget_line", "budget_stop", "closing_lines", "source_changed", "usage_line", "whole_run"]


def closing_lines(result: RunResult, *, failed: bool) -> list[str]:
    """The lines that say how the run ended: ``run ID completed: ... -> table T``, then, for a resumed
    run, this invocation's and the whole run's totals, each labelled; for a generator, its tokens."""
    verdict = "FAILED" if failed else "completed"
    if failed and result.stopped:
        verdict = f"stopped: {result.stopped}"
    where = _where_to(result.results_table)
    if not result.resumed:
        return [
            f"run {result.run_id} {verdict}: {_merged(result)} -> {where}",
            *whole_run(result),
            *usage_line(result),
        ]
    now, totals = result.this_invocation, result.totals
    return [
        f"run {result.run_id} {verdict} (resumed) -> {where}",
        f"this invocation: {plural(now.rows_out, 'row')} scored, "
        f"{plural(now.rows_failed, 'dead letter')}, {plural(now.shards_done, 'shard')} finished",
        f"whole run, resumes included: {plural(totals.rows_out, 'row')} scored, "
        f"{plural(totals.rows_failed, 'dead letter')}, {result.skipped.describe()}, {_shards(result)}"
        + "".join(f", {count}" for count in said(totals.counts)),
        *usage_line(result),
    ]


def usage_line(result: RunResult) -> list[str]:
    """``["cost $0.0123 ($0.041/1k rows, $2.10/1M tokens), 0.0049 device-hours (cpu 17.6 s)"]``: the whole
    run's, over every chunk it committed (see :mod:`shardwise.cost`); ``[]`` when it committed none. Then,
    when it ended past a budget it ran under, ``run ID ended past its budget: $0.0918 spent of ...``."""
    usage = result.totals.usage
    said = [usage.said()] if usage.rows or usage.device_s else []
    past = [] if result.past_budget is None else [f"run {result.run_id} ended {result.past_budget}"]
    return said + past


def whole_run(result: RunResult) -> list[str]:
    """``["whole run, resumes included: 144 completion tokens, 360 prompt tokens"]``, or ``[]``."""
    counts = result.totals.counts
    return [f"whole run, resumes included: {', '.join(said(counts))}"] if counts else []


def _merged(result: RunResult) -> str:
    """Rows scored with the merge's split, dead letters, skipped rows (the plan's, so the whole run's)."""
    totals, merge = result.totals, result.merge
    return (
        f"{plural(totals.rows_out, 'row')} scored ({merge.inserted:,} new, {merge.updated:,} "
        f"updated, {merge.unchanged:,} unchanged), {plural(totals.rows_failed, 'dead letter')}, "
        f"{result.skipped.describe()}, {_shards(result)}"
    )


def _shards(result: RunResult) -> str:
    return f"{result.totals.shards_done}/{plural(result.totals.shards_total, 'shard')} done"


def _where_to(target: str) -> str:
    """``table NAME`` for a results table, the location itself (``delta:s3://...``) for a lake sink."""
    return target if ":" in target else f"table {target}"


def budget_stop(message: str) -> bool:
    """Whether a shard's failure is its stop at the run's budget (``BudgetReached: ...``)."""
    return message.startswith(f"{BudgetReached.__name__}: ")


def source_changed(message: str) -> bool:
    """Whether a run's failures name a source file changed under its plan (``SourceChangedError: ...``),
    which no ``--resume`` can read: only a new run can score it."""
    return f"{SourceChangedError.__name__}: " in message


def budget_line(result: RunResult, budget_usd: float | None, budget_tokens: int | None, finish: str) -> str:
    """``stopped: budget: $0.40 spent of the $0.50 budget (...); go on with: ...``, one line, naming each
    budget given (dollars, tokens or both) and the command that resumes the run (``finish``, see
    :func:`~shardwise.pipeline.resume.resume_command`) with the flags for larger ones."""
    usage = result.totals.usage
    spent, flags = [], []
    if budget_usd is not None:
        spent.append(f"{dollars(usage.cost_usd or 0.0)} spent of the {dollars(budget_usd)} budget")
        flags.append("--budget-usd LARGER")
    if budget_tokens is not None:
        spent.append(f"{usage.tokens:,} tokens spent of the {budget_tokens:,}-token budget")
        flags.append("--budget-tokens LARGER")
    return (
        f"stopped: budget: {' and '.join(spent)} "
        f"({plural(result.totals.rows_out, 'row')} scored and kept, "
        f"{_shards(result)}); go on with: {finish} {' '.join(flags)}"
    )
