"""What a run shows in the Prefect UI: a summary and a table per shard (live progress: tasks/progress.py).

Everything here is built from figures already computed by the engine and the
store; nothing holds a secret (sources appear by their password-free identity).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from shardwise.counts import in_words
from shardwise.pipeline import ShardOutcome
from shardwise.pipeline.skipped import Skipped
from shardwise.precision_guard import shown
from shardwise.tasks.markdown import code, text
from shardwise.words import plural

__all__ = ["plan_markdown", "publish_plan", "publish_run", "run_markdown", "worker_rows"]


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


def publish_run(
    summary: Mapping[str, Any], outcomes: Sequence[ShardOutcome], failed: Mapping[int, str]
) -> None:
    """The run's markdown summary and its per-shard table."""
    rows = shard_rows(outcomes)
    create_table_artifact(key="shardwise-shards", table=rows, description="One row per shard")
    create_markdown_artifact(
        key="shardwise-run", markdown=run_markdown(summary, rows, worker_rows(outcomes), failed)
    )


def _retried(summary: dict[str, Any]) -> str:
    """``; 3 failed tries were tried again`` (from the shard transitions), or nothing."""
    retried = int(summary.get("shard_states", {}).get("retried", 0))
    return f"; {retried} failed {'try was' if retried == 1 else 'tries were'} tried again" if retried else ""


def _precision(summary: Mapping[str, Any]) -> str:
    """The run's precision, and what the accuracy guard measured."""
    found = summary.get("precision_agreement")
    if found is None:
        return str(summary["precision"])
    if summary["precision"] == "fp32":
        return f"fp32 (the reduced precision agreed with fp32 only to {shown(found)}: fell back)"
    cached = ", from the calibration cache" if summary.get("precision_agreement_from") == "cache" else ""
    return f"{summary['precision']} (agreement with fp32 {shown(found)} on calibration texts{cached})"


def _lease_rows(summary: Mapping[str, Any]) -> list[str]:
    """Who held the run's lease, and for a resumed run whom it was taken from (an abandoned run's
    process, or a live one by force)."""
    rows = []
    if summary.get("owner"):
        rows.append(f"| Lease held by | {code(summary['owner'])} |")
    if summary.get("took_over"):
        rows.append(f"| Resumed a run | {text(summary['took_over'])} |")
    return rows


def _scored_rows(summary: Mapping[str, Any]) -> list[str]:
    """Rows scored, dead letters and token totals (whole run): of the run, and for a resumed run, labelled,
    of the whole run and of this invocation (see ``flows/totals.py``: the new/updated/unchanged split
    fits neither)."""
    if not summary.get("resumed"):
        return [
            f"| Rows scored | {summary['rows_out']} ({summary['inserted']} new, {summary['updated']} "
            f"updated, {summary['unchanged']} unchanged) |",
            f"| Dead letters | {summary['rows_failed']} |",
            *_count_rows(summary),
            _skipped_row(Skipped.from_dict(summary.get("skipped"))),
        ]
    now = summary["this_invocation"]
    return [
        f"| Rows scored, whole run | {summary['rows_out']} |",
        f"| Dead letters, whole run | {summary['rows_failed']} |",
        *_count_rows(summary),
        _skipped_row(Skipped.from_dict(summary.get("skipped")), ", whole run"),
        f"| Rows scored by this invocation (resumed) | {now['rows_out']} |",
        f"| Dead letters of this invocation | {now['rows_failed']} |",
        f"| Shards finished by this invocation | {now['shards_done']} |",
    ]


def _count_rows(summary: Mapping[str, Any]) -> list[str]:
    """The run's count outputs (a generator's tokens), summed over the whole run: every committed chunk,
    resumed or not. None for a model that declares no counts (an encoder)."""
    counts = summary.get("counts") or {}
    return [f"| {text(in_words(name).capitalize())}, whole run | {counts[name]} |" for name in sorted(counts)]


def _skipped_row(skipped: Skipped, scope: str = "") -> str:
    """Rows neither scored nor dead-lettered, by reason (see :mod:`shardwise.pipeline.skipped`); counted
    when the run is planned, so the whole run's."""
    reasons = skipped.reasons()
    return f"| Skipped{scope} | {skipped.total}{f' ({text(reasons)})' if reasons else ''} |"


def run_markdown(
    summary: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    workers: Sequence[Mapping[str, Any]],
    failed: Mapping[int, str],
) -> str:
    """A readable report: totals, engine figures, versions, per-shard wall time, and SQL to query it.

    A generator's token totals (its count outputs) come after the dead letters;
    the ``Tokens/s`` row is the engine's batch cost, an upper bound for a generator.

    Every value passes through :mod:`tasks.markdown`, so none can break the tables.
    """
    run_id, table = summary["run_id"], summary["results_table"]
    lines = [
        f"# Shardwise run {code(run_id)}",
        "",
        "| | |",
        "|---|---|",
        f"| Status | **{text(summary['status'])}** |",
        *_scored_rows(summary),
        f"| Truncated rows | {summary['rows_truncated']} (longer than the model's limit: scored on their "
        "start) |",
        f"| Shards | {summary['shards_done']}/{summary['shards_total']} done, "
        f"{summary['shards_failed']} failed{_retried(summary)} |",
        f"| Padding efficiency | {summary['padding_efficiency']:.3f} |",
        f"| Rows/s | {summary['rows_per_s']:.1f} |",
        f"| Tokens/s | {summary['tokens_per_s']:.1f} (unpadded batch cost; for a generator, prompt plus "
        "max new tokens per row) |",
        f"| OOM splits | {summary['oom_splits']} |",
        f"| Model | {text(summary['model'])} {code(summary['model_version'][:16])} |",
        f"| Precision | {text(_precision(summary))} |",
        f"| Code version | {code(summary['code_version'])} |",
        f"| Source | {code(summary['source'])} (snapshot {code(summary['snapshot'] or 'none')}) |",
        f"| Started by | {text(summary['started_by'])} |",
        *_lease_rows(summary),
        f"| Runner | {text(summary['runner'])}, {plural(summary['workers'], 'worker')} |",
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
        *(f"| {text(name)} | {_plan_value(value)} |" for name, value in report.items()),
    ]
    return "\n".join(lines)


def _plan_value(value: Any) -> str:
    """A name as code, a list (the runs still unfinished) as its items joined, anything else as text."""
    if isinstance(value, list):
        return text("; ".join(map(str, value)) or "none")
    return code(value) if isinstance(value, str) else text(value)


def publish_plan(report: Mapping[str, Any]) -> None:
    """The dry run's report."""
    create_markdown_artifact(key="shardwise-plan", markdown=plan_markdown(report))
