"""How a run's summary states its totals, for the CLI's closing lines and the flow's log.

Two scopes, never mixed in one figure:

- **the whole run**: every chunk the run committed, whichever invocation
  scored it, as the ledger sums it when the run finishes (``rows_out``,
  ``rows_failed``, ``shards_done``, and a generator's token ``counts``), so a
  resumed run reports what an uninterrupted one would have;
- **this invocation**: what this command committed, the whole run's
  figures less what the run had already committed when this invocation took
  it (``this_invocation`` in the summary, see :func:`this_invocation`).

A run started afresh has one scope, and its closing line is as it always
was, with the merge's new/updated/unchanged split. A resumed run's lines
label both scopes, and leave that split out: the merge counts a worker sees
are its shard's over all its chunks, earlier invocations' included, so they
fit neither scope. Rows skipped (a NULL key, already scored) are counted when
the run is planned, so they are the whole run's. A model that declares no count outputs (an encoder, a
classifier) states no tokens. The rates, this invocation's, are in the live
progress (``tasks/progress.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardwise.counts import said
from shardwise.pipeline.skipped import Skipped
from shardwise.words import plural

__all__ = ["closing_lines", "this_invocation", "whole_run"]

_SCOPED = ("rows_in", "rows_out", "rows_failed", "shards_done")
"""The counts that both scopes have: the whole run's, and this invocation's share of them."""


def this_invocation(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, int]:
    """What this invocation committed: the run's counts when it finished less those when it took the run."""
    return {name: int(after[name]) - int(before.get(name, 0)) for name in _SCOPED}


def closing_lines(summary: Mapping[str, Any], *, failed: bool) -> list[str]:
    """The lines that say how the run ended: ``run ID completed: ... -> table T``, then, for a resumed
    run, this invocation's and the whole run's totals, each labelled; for a generator, its tokens."""
    verdict = "FAILED" if failed else "completed"
    where = _where_to(summary["results_table"])
    if not summary.get("resumed"):
        return [f"run {summary['run_id']} {verdict}: {_merged(summary)} -> {where}", *whole_run(summary)]
    now = summary["this_invocation"]
    return [
        f"run {summary['run_id']} {verdict} (resumed) -> {where}",
        f"this invocation: {plural(now['rows_out'], 'row')} scored, "
        f"{plural(now['rows_failed'], 'dead letter')}, {plural(now['shards_done'], 'shard')} finished",
        f"whole run, resumes included: {plural(summary['rows_out'], 'row')} scored, "
        f"{plural(summary['rows_failed'], 'dead letter')}, {_skipped(summary)}, {_shards(summary)}"
        + "".join(f", {count}" for count in said(summary.get("counts") or {})),
    ]


def whole_run(summary: Mapping[str, Any]) -> list[str]:
    """``["whole run, resumes included: 144 completion tokens, 360 prompt tokens"]``, or ``[]``."""
    counts = summary.get("counts") or {}
    return [f"whole run, resumes included: {', '.join(said(counts))}"] if counts else []


def _merged(summary: Mapping[str, Any]) -> str:
    return (
        f"{plural(summary['rows_out'], 'row')} scored ({summary['inserted']:,} new, {summary['updated']:,} "
        f"updated, {summary['unchanged']:,} unchanged), {plural(summary['rows_failed'], 'dead letter')}, "
        f"{_skipped(summary)}, {_shards(summary)}"
    )


def _skipped(summary: Mapping[str, Any]) -> str:
    """``3 skipped (2 with a NULL key, 1 already scored)``: the plan's, so the whole run's."""
    return Skipped.from_dict(summary.get("skipped")).describe()


def _shards(summary: Mapping[str, Any]) -> str:
    return f"{summary['shards_done']}/{plural(summary['shards_total'], 'shard')} done"


def _where_to(target: str) -> str:
    """``table NAME`` for a results table, the location itself (``delta:s3://...``) for a lake sink."""
    return target if ":" in target else f"table {target}"
