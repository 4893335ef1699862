"""What a run shows in the Prefect UI: a summary and a table per shard (live progress: tasks/progress.py).

Everything here is built from figures already computed by the engine and the
store; nothing holds a secret (sources appear by their password-free identity).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from shardwise.cost.usage import RunUsage, dollars
from shardwise.model.counts import in_words, share
from shardwise.pipeline import ShardOutcome
from shardwise.pipeline.run_result import LeaseHeld, PrecisionUsed, RunResult
from shardwise.pipeline.skipped import Skipped
from shardwise.precision.guard import shown
from shardwise.tasks.markdown import code, text
from shardwise.words import plural

__all__ = ["plan_figure", "plan_markdown", "publish_plan", "publish_run", "run_markdown", "worker_rows"]


def shard_rows(outcomes: Sequence[ShardOutcome]) -> list[dict[str, Any]]:
    """One row per shard that ran in this flow run, for the table artifact; a model's count outputs (a
    generator's ``prompt_tokens`` and ``completion_tokens``) are columns too, summed over the shard."""
    return [
        {
            "shard": o.shard_id,
            "status": "already done" if o.skipped else "done",
            "rows_in": o.rows_in,
            "scored": o.rows_out,
            "dead_letters": o.rows_failed,
            "truncated": o.rows_truncated,
            "wall_s": round(o.wall_s, 2),
            "padding_efficiency": round(float(o.engine.get("padding_efficiency", 1.0)), 4),
            "rows_per_s": round(float(o.engine.get("rows_per_s", 0.0)), 1),
            "tokens_per_s": round(float(o.engine.get("tokens_per_s", 0.0)), 1),
            "oom_splits": int(o.engine.get("oom_splits", 0)),
            "attempt": o.attempt,
            "host": o.host,
            "device": o.device,
            "worker": o.worker,
            **o.counts,
        }
        for o in sorted(outcomes, key=lambda o: o.shard_id)
    ]


def worker_rows(outcomes: Sequence[ShardOutcome]) -> list[dict[str, Any]]:
    """One row per worker: where it ran, how many shards and rows, and its busy time.

    A straggler shows as a worker with far more busy time than the others; an
    idle GPU as a device with no row, or with few shards.
    """
    by_worker: dict[str, dict[str, Any]] = {}
    for o in outcomes:
        if o.skipped:
            continue
        row = by_worker.setdefault(
            o.worker,
            {"worker": o.worker, "host": o.host, "device": o.device, "shards": 0, "rows": 0, "busy_s": 0.0,
             "model_load_s": 0.0},
        )  # fmt: skip
        row["shards"] += 1
        row["rows"] += o.rows_in
        row["busy_s"] = round(row["busy_s"] + o.wall_s, 2)
        row["model_load_s"] = round(row["model_load_s"] + o.model_load_s, 2)
    return sorted(by_worker.values(), key=lambda r: r["worker"])


def publish_run(result: RunResult, outcomes: Sequence[ShardOutcome], failed: Mapping[int, str]) -> None:
    """The run's markdown summary and its per-shard table."""
    rows = shard_rows(outcomes)
    create_table_artifact(key="shardwise-shards", table=rows, description="One row per shard")
    create_markdown_artifact(
        key="shardwise-run", markdown=run_markdown(result, rows, worker_rows(outcomes), failed)
    )


def _retried(result: RunResult) -> str:
    """``; 3 failed tries were tried again`` (from the shard transitions), or nothing."""
    retried = int(result.shards.states.get("retried", 0))
    return f"; {retried} failed {'try was' if retried == 1 else 'tries were'} tried again" if retried else ""


def _precision(used: PrecisionUsed) -> str:
    """The run's precision, and what the accuracy guard measured."""
    found = used.agreement
    if found is None:
        return used.name
    if used.name == "fp32":
        return f"fp32 (the reduced precision agreed with fp32 only to {shown(found)}: fell back)"
    cached = ", from the calibration cache" if used.agreement_from == "cache" else ""
    return f"{used.name} (agreement with fp32 {shown(found)} on calibration texts{cached})"


def _lease_rows(lease: LeaseHeld) -> list[str]:
    """Who held the run's lease, and for a resumed run whom it was taken from (an abandoned run's
    process, or a live one by force)."""
    rows = []
    if lease.owner:
        rows.append(f"| Lease held by | {code(lease.owner)} |")
    if lease.took_over:
        rows.append(f"| Resumed a run | {text(lease.took_over)} |")
    return rows


def _scored_rows(result: RunResult) -> list[str]:
    """Rows scored, dead letters and token totals (whole run): of the run, and for a resumed run, labelled,
    of the whole run and of this invocation (see ``flows/totals.py``: the new/updated/unchanged split
    fits neither)."""
    totals, merge = result.totals, result.merge
    if not result.resumed:
        return [
            f"| Rows scored | {totals.rows_out} ({merge.inserted} new, {merge.updated} "
            f"updated, {merge.unchanged} unchanged) |",
            f"| Dead letters | {totals.rows_failed} |",
            *_count_rows(totals.counts),
            _skipped_row(result.skipped),
        ]
    now = result.this_invocation
    return [
        f"| Rows scored, whole run | {totals.rows_out} |",
        f"| Dead letters, whole run | {totals.rows_failed} |",
        *_count_rows(totals.counts),
        _skipped_row(result.skipped, ", whole run"),
        f"| Rows scored by this invocation (resumed) | {now.rows_out} |",
        f"| Dead letters of this invocation | {now.rows_failed} |",
        f"| Shards finished by this invocation | {now.shards_done} |",
    ]


def _count_rows(counts: Mapping[str, int]) -> list[str]:
    """The run's count outputs (a generator's tokens), summed over the whole run: every committed chunk,
    resumed or not. None for a model that declares no counts (an encoder)."""
    return [
        f"| {text(in_words(name).capitalize())}, whole run | {counts[name]}{share(counts, name)} |"
        for name in sorted(counts)
    ]


def _usage_rows(usage: RunUsage, scope: str) -> list[str]:
    """The whole run's cost and device time (see :mod:`shardwise.cost`), labelled so for a resumed run
    (``scope``): the dollars are the same as the summary line's and ``shardwise runs``', read from the
    same chunk rows."""
    if not usage.rows and not usage.device_s:
        return []  # nothing committed: no figures to show
    rows = [f"| Device-hours{scope} | {text(usage.hours_figure())} |"]
    if usage.cost_usd is None:
        return [*rows, f"| Cost{scope} | unknown (no price set) |"]
    return [
        *rows,
        f"| Cost{scope} | {text(dollars(usage.cost_usd))} |",
        f"| Cost per 1k rows{scope} | {text(dollars(usage.per_1k_rows))} |",
        f"| Cost per 1M tokens{scope} | {text(dollars(usage.per_1m_tokens))} |",
    ]


def _skipped_row(skipped: Skipped, scope: str = "") -> str:
    """Rows neither scored nor dead-lettered, by reason (see :mod:`shardwise.pipeline.skipped`); counted
    when the run is planned, so the whole run's."""
    reasons = skipped.reasons()
    return f"| Skipped{scope} | {skipped.total}{f' ({text(reasons)})' if reasons else ''} |"


def run_markdown(
    result: RunResult,
    rows: Sequence[Mapping[str, Any]],
    workers: Sequence[Mapping[str, Any]],
    failed: Mapping[int, str],
) -> str:
    """A readable report: totals, engine figures, versions, per-shard wall time, and SQL to query it.

    A generator's token totals (its count outputs) come after the dead letters;
    the ``Tokens/s`` row is the engine's batch cost, an upper bound for a generator.

    Every value passes through :mod:`tasks.markdown`, so none can break the tables.
    """
    run_id, table, totals, engine = result.run_id, result.results_table, result.totals, result.engine
    lines = [
        f"# Shardwise run {code(run_id)}",
        "",
        "| | |",
        "|---|---|",
        f"| Status | **{text(result.status)}** |",
        *_scored_rows(result),
        *_usage_rows(totals.usage, ", whole run" if result.resumed else ""),
        *([] if result.past_budget is None else [f"| Budget | **{text(result.past_budget)}** |"]),
        f"| Truncated rows | {result.rows_truncated} (longer than the model's limit: scored on their "
        "start) |",
        f"| Shards | {totals.shards_done}/{totals.shards_total} done, "
        f"{totals.shards_failed} failed{_retried(result)} |",
        f"| Padding efficiency | {engine.padding_efficiency:.3f} |",
        f"| Rows/s | {engine.rows_per_s:.1f} |",
        f"| Tokens/s | {engine.tokens_per_s:.1f} (unpadded batch cost; for a generator, prompt plus "
        "max new tokens per row) |",
        f"| OOM splits | {engine.oom_splits} |",
        f"| Model | {text(result.model)} {code(result.model_version[:16])} |",
        f"| Precision | {text(_precision(result.precision))} |",
        f"| Code version | {code(result.code_version)} |",
        f"| Source | {code(result.source)} (snapshot {code(result.snapshot or 'none')}) |",
        f"| Started by | {text(result.started_by)} |",
        *_lease_rows(result.lease),
        f"| Runner | {text(result.fanout.runner)}, {plural(result.fanout.workers, 'worker')} |",
        "",
        "## Workers",
        "",
        "| worker | host | device | shards | rows | busy s | model load s |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {code(w['worker'])} | {text(w['host'])} | {text(w['device'])} | {w['shards']} | "
            f"{w['rows']} | {w['busy_s']} | {w['model_load_s']} |"
            for w in workers
        ),
        "",
        "## Shards",
        "",
        "| shard | status | rows in | scored | dead letters | truncated | wall s | padding eff. | rows/s | "
        "host | device |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {r['shard']} | {text(r['status'])} | {r['rows_in']} | {r['scored']} | {r['dead_letters']} | "
            f"{r['truncated']} | {r['wall_s']} | {r['padding_efficiency']} | {r['rows_per_s']} | "
            f"{text(r['host'])} | {text(r['device'])} |"
            for r in rows
        ),
        *(f"| {shard} | **failed** | | | | | | | | | |" for shard in sorted(failed)),
        "",
        "## Query the results",
        "",
        "```sql",
        f"SELECT source_key, model_version, truncated, scored_at FROM {table}",
        f"  WHERE run_id = '{run_id}' LIMIT 20;",
        f"SELECT source_key, error_class, message FROM shardwise_errors WHERE run_id = '{run_id}';",
        "SELECT shard_id, status, attempts, rows_out, last_error FROM shardwise_shards",
        f"  WHERE run_id = '{run_id}';",
        "```",
    ]
    if failed:
        lines += [
            "",
            "## Failed shards",
            "",
            *(f"- shard {i}: {text(msg)}" for i, msg in sorted(failed.items())),
        ]
    return "\n".join(lines)


def plan_markdown(report: Mapping[str, Any]) -> str:
    """The dry run's report as a two-column table; values that name things are shown as code."""
    lines = [
        "# Shardwise plan (dry run)",
        "",
        "| | |",
        "|---|---|",
        *(f"| {text(name)} | {_plan_value(name, value)} |" for name, value in report.items()),
    ]
    return "\n".join(lines)


def _plan_value(name: str, value: Any) -> str:
    """A name as code, a list (the runs still unfinished) as its items joined, None (a figure the plan
    cannot tell) as ``unknown``, a figure as ``shardwise plan`` prints it (:func:`plan_figure`)."""
    if value is None:
        return "unknown"
    if isinstance(value, list):
        return text("; ".join(map(str, value)) or "none")
    return code(value) if isinstance(value, str) else text(plan_figure(name, value))


def plan_figure(name: str, value: float | int | bool) -> str:
    """A plan's number as a person reads it, as ``shardwise plan`` prints it: dollars as ``$0.0006842``
    (never a raw float), device-hours to four places, counts with thousands separators."""
    if isinstance(value, bool):
        return str(value).lower()
    if "usd" in name:
        return dollars(value)
    if "hours" in name:
        return f"{value:.4f}"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


def publish_plan(report: Mapping[str, Any]) -> None:
    """The dry run's report."""
    create_markdown_artifact(key="shardwise-plan", markdown=plan_markdown(report))
