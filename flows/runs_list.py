"""``shardwise runs``: the latest runs of a ledger, live, finished or abandoned.

A run's row in ``shardwise_runs`` says ``running`` from its start until its
process records the end; a process that was killed never does. Its lease
tells the two apart (:mod:`shardwise.results.leases`): a run still running
whose lease expired, or whose process on this host is gone, is listed as
``abandoned``, with the command that finishes it. Counts are summed from the
run's shards as they are now, and the SHARDS column says how many are done of
the total and, of the others, how many are failed, retrying (a try failed and
another is coming) or being scored by a worker holding a live lease (see
:mod:`shardwise.results.shard_states`). TOKENS, DEVICE-H and COST sum the
run's committed chunks (:mod:`shardwise.cost`): a run's cost is the same
here as in its summary line and its artifact, read from the same rows. A run
that ended past the budget its last invocation ran under (the estimates' error;
see :mod:`shardwise.cost.budget`) has ``(past budget)`` after its COST and a
line below the table saying by how much, as its summary did.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from shardwise.cost.usage import dollars
from shardwise.db.codec import utc_now
from shardwise.pipeline.destination import find_ledger
from shardwise.pipeline.resume import resume_command
from shardwise.results import Ledger, RunListing
from shardwise.results.leases import abandoned_why, lease_live
from shardwise.results.probe import check_ledger
from shardwise.secrets.redact import redact
from shardwise.tasks.connections import resolve
from shardwise.words import plural

__all__ = ["print_runs", "run_json", "runs_table"]

_HEADER = (
    "RUN ID",
    "STATUS",
    "STARTED (UTC)",
    "OWNER",
    "LEASE",
    "SHARDS",
    "ROWS",
    "TOKENS",
    "DEVICE-H",
    "COST",
)


def print_runs(
    results: str | None, limit: int = 20, *, ledger: str | None = None, as_json: bool = False
) -> None:
    """Print the latest ``limit`` runs of the ledger ``ledger``, or of the one runs into ``results`` use
    by default (see :mod:`shardwise.pipeline.destination`); each a URL or ``env:NAME``. ``as_json``:
    one JSON object per run, a line each (:func:`run_json`), and nothing else."""
    url = find_ledger(ledger, results, None, resolve)
    check_ledger(url, "existing")  # a mistyped path is refused, never made into an empty ledger
    with Ledger(url) as found:
        runs = found.recent_runs(limit)
        url = found.url
    now = utc_now()
    if as_json:
        for run in runs:
            print(json.dumps(run_json(run, now)))
        return
    if not runs:
        print(redact(f"no runs recorded in {url}"))  # a ledger given as env:NAME is named so
        return
    print(runs_table(runs, now))
    for run in runs:
        past = run.past_budget(now)
        if past is not None:
            print(f"run {run.run_id} ended {past}")  # as its summary line says it
        if run.state(now) == "abandoned":
            print(
                f"run {run.run_id} is abandoned: {abandoned_why(run.owner, run.lease_expires_at, now)}; "
                f"finish it with: {resume_command(run.run_id, ledger=ledger, results=results, source=None)}"
            )


def run_json(run: RunListing, now: datetime) -> dict[str, Any]:
    """A run as plain JSON: its id, state, model, shards, rows scored and dead letters, and its usage
    (rows, tokens, device time, cost; see :meth:`~shardwise.cost.RunUsage.as_json`), and ``past_budget``:
    the summary's ``past its budget: ...`` when it ended past the budget it ran under, else null."""
    counts = run.counts
    return {
        "run_id": run.run_id,
        "status": run.state(now),
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "model": run.model_name,
        "results_table": redact(run.results_table),
        "shards_total": counts.shards_total,
        "shards_done": counts.shards_done,
        "shards_failed": counts.shards_failed,
        "rows_scored": counts.rows_out,
        "dead_letters": counts.rows_failed,
        **run.usage.as_json(),
        "device_hours": run.usage.device_hours,
        "past_budget": run.past_budget(now),
    }


def runs_table(runs: Sequence[RunListing], now: datetime) -> str:
    """The runs as aligned columns under a header, one line each."""
    lines = [_HEADER, *(_row(run, now) for run in runs)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(_HEADER))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def _row(run: RunListing, now: datetime) -> tuple[str, ...]:
    state, counts = run.state(now), run.counts
    notes = [f"{counts.shards_failed} failed"] if counts.shards_failed else []
    if run.shard_states.get("retrying"):
        notes.append(f"{run.shard_states['retrying']} retrying")
    if run.shards_running and state == "running":
        notes.append(f"{run.shards_running} scoring")
    shards = f"{counts.shards_done}/{counts.shards_total}" + (f" ({', '.join(notes)})" if notes else "")
    dead = f" (+{plural(counts.rows_failed, 'dead letter')})" if counts.rows_failed else ""
    rows = f"{counts.rows_out:,}{dead}"
    started = run.started_at.strftime("%Y-%m-%d %H:%M:%S") if run.started_at else "-"
    usage = run.usage
    tokens = f"{usage.tokens:,}" if usage.counts else "-"
    hours = f"{usage.device_hours:.4f}" if usage.device_s else "-"
    return (
        run.run_id, state, started, run.owner or "-", _lease(run, state, now), shards, rows, tokens, hours,
        dollars(usage.cost_usd) + (" (past budget)" if run.past_budget(now) else ""),
    )  # fmt: skip


def _lease(run: RunListing, state: str, now: datetime) -> str:
    """``until 12:00:03`` for a live run, ``expired 12:00:03`` for an abandoned one (``owner gone`` when
    its lease has yet to run out but its process, on this host, is gone), else ``-``."""
    if run.lease_expires_at is None or state not in ("running", "abandoned"):
        return "-"
    if state == "abandoned" and lease_live(run.lease_expires_at, now):
        return "owner gone"
    verb = "until" if state == "running" else "expired"
    return f"{verb} {run.lease_expires_at.strftime('%H:%M:%S')}"
