"""The run and plan artifacts render as written: no value can split a table row or become a link."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from shardwise.pipeline.run_result import (
    EngineFigures,
    FanoutUsed,
    InvocationCounts,
    LeaseHeld,
    MergeTotals,
    PrecisionUsed,
    RunResult,
)
from shardwise.pipeline.skipped import Skipped
from shardwise.results import RunCounts
from shardwise.tasks.artifacts import plan_markdown, run_markdown
from shardwise.tasks.markdown import code, text

SNAPSHOT = "00000003-0000001B-1|pg"  # PostgreSQL snapshot ids may hold a |
SOURCE = "postgresql://app@db.example:5432/prod#public.docs"


def _cells(row: str) -> list[str]:
    """A Markdown table row split the way GitHub-flavoured Markdown splits it: on unescaped pipes."""
    return re.split(r"(?<!\\)\|", row.strip())[1:-1]


def _summary(counts: Mapping[str, int] | None = None, **overrides: Any) -> RunResult:
    summary = RunResult(
        run_id="run-1",
        status="completed",
        results_table="shardwise_results",
        source=SOURCE,
        snapshot=SNAPSHOT,
        model="my_model*v2",
        model_version="abc|def",
        code_version="1.0",
        started_by="user:ops@example",
        totals=RunCounts(rows_out=10, rows_failed=1, shards_done=1, shards_total=1, shards_failed=0,
                         counts=counts or {}),
        merge=MergeTotals(inserted=10, updated=0, unchanged=0),
        rows_truncated=2,
        engine=EngineFigures(padding_efficiency=0.9, rows_per_s=100.0, tokens_per_s=1000.0, oom_splits=0),
        precision=PrecisionUsed("fp32", agreement=None),
        fanout=FanoutUsed(runner="thread", workers=1),
    )  # fmt: skip
    return dataclasses.replace(summary, **overrides)


SHARD = {
    "shard": 0,
    "status": "done",
    "rows_in": 11,
    "scored": 10,
    "dead_letters": 1,
    "truncated": 2,
    "wall_s": 1.0,
    "padding_efficiency": 0.9,
    "rows_per_s": 10.0,
    "host": "node|a",
    "device": "cpu",
}


def test_every_table_row_of_the_run_report_keeps_its_columns() -> None:
    workers = [
        {
            "worker": "h|1:2/0",
            "host": "h",
            "device": "cpu",
            "shards": 1,
            "rows": 11,
            "busy_s": 1,
            "model_load_s": 0,
        }
    ]
    markdown = run_markdown(_summary(), [SHARD], workers, {3: "ValueError: a | b"})
    tables: list[list[str]] = []
    for line in markdown.splitlines():
        if line.startswith("|"):
            if tables and len(tables[-1]) and line.startswith("|---"):
                continue
            tables.append(_cells(line))
    by_width: dict[int, int] = {}
    for cells in tables:
        by_width[len(cells)] = by_width.get(len(cells), 0) + 1
    assert set(by_width) == {2, 7, 11}, by_width  # the summary, workers and shards tables only
    assert f"`{SNAPSHOT.replace('|', chr(92) + '|')}`" in markdown


def test_the_run_report_counts_truncated_rows() -> None:
    markdown = run_markdown(_summary(), [SHARD], [], {})
    assert "| Truncated rows | 2 " in markdown


def test_no_address_in_a_report_can_become_a_mail_link() -> None:
    markdown = run_markdown(_summary(), [], [], {})
    assert "ops\\@example" in markdown  # plain text: escaped
    assert f"`{SOURCE}`" in markdown  # code: never linked
    plan = plan_markdown({"source": SOURCE, "snapshot": SNAPSHOT, "shards": 2, "note": "a@b"})
    for line in plan.splitlines()[4:]:
        assert len(_cells(line)) == 2, line
    assert "`a@b`" in plan and f"`{SOURCE}`" in plan  # strings name things: shown as code


def test_text_and_code_give_one_line() -> None:
    assert text("a\nb|c*d_e") == "a b\\|c\\*d\\_e"
    assert code("x`y|z\n") == "`x'y\\|z`"


def test_the_run_report_says_who_held_the_run_and_whom_a_resume_took_it_from() -> None:
    took_over = "abandoned by gpu|1:42/0 (lease expired 2025-05-01 12:00:03 UTC)"
    markdown = run_markdown(_summary(lease=LeaseHeld(owner="node|b:7/0", took_over=took_over)), [], [], {})
    rows = [line for line in markdown.splitlines() if line.startswith(("| Lease held by", "| Resumed a run"))]
    assert [len(_cells(row)) for row in rows] == [2, 2], rows
    assert "abandoned by gpu\\|1:42/0" in rows[1]
    assert "Lease held by" not in run_markdown(_summary(), [], [], {}), "a summary without a lease"


def test_the_plan_report_lists_unfinished_runs_in_one_cell() -> None:
    runs = ["run a is abandoned (0/2 shards done)", "run b|c is still running"]
    plan = plan_markdown({"shards": 2, "unfinished_runs": runs}).splitlines()
    assert [len(_cells(line)) for line in plan[4:]] == [2, 2]
    assert "run a is abandoned (0/2 shards done); run b\\|c is still running" in plan[-1]
    assert plan_markdown({"unfinished_runs": []}).endswith("| unfinished\\_runs | none |")


def test_a_generators_report_gives_its_token_totals_over_the_whole_run_and_an_encoders_none() -> None:
    counts = {"prompt_tokens": 360, "completion_tokens": 144}
    lines = run_markdown(_summary(counts=counts), [SHARD], [], {}).splitlines()
    rows = [line for line in lines if "tokens, whole run" in line]
    assert rows == ["| Completion tokens, whole run | 144 |", "| Prompt tokens, whole run | 360 |"]
    assert lines.index(rows[0]) == 1 + next(
        i for i, line in enumerate(lines) if line.startswith("| Dead letters")
    )
    for summary in (_summary(), _summary(counts={})):
        assert "whole run" not in run_markdown(summary, [SHARD], [], {}), "no count outputs: no token rows"


def test_the_report_says_how_many_rows_were_skipped_and_why() -> None:
    skipped = Skipped(null_key=2, already_scored=5)
    lines = run_markdown(_summary(skipped=skipped), [SHARD], [], {}).splitlines()
    assert "| Skipped | 7 (2 with a NULL key, 5 already scored) |" in lines
    assert "| Skipped | 0 |" in run_markdown(_summary(), [SHARD], [], {}).splitlines()


def test_a_resumed_runs_report_labels_the_whole_run_and_this_invocation() -> None:
    now = InvocationCounts(rows_in=4, rows_out=4, rows_failed=0, shards_done=1)
    summary = _summary(resumed=True, this_invocation=now, counts={"completion_tokens": 30})
    rows = [line for line in run_markdown(summary, [SHARD], [], {}).splitlines() if "whole run" in line or
            "invocation" in line]  # fmt: skip
    assert rows == [
        "| Rows scored, whole run | 10 |",
        "| Dead letters, whole run | 1 |",
        "| Completion tokens, whole run | 30 |",
        "| Skipped, whole run | 0 |",
        "| Rows scored by this invocation (resumed) | 4 |",
        "| Dead letters of this invocation | 0 |",
        "| Shards finished by this invocation | 1 |",
    ]
    assert "new," not in run_markdown(summary, [SHARD], [], {}), "the merge split fits neither scope"


def test_a_run_past_its_budget_says_so_in_its_report() -> None:
    past = "past its budget: $0.0918 spent of the $0.01 budget"
    rows = [
        r for r in run_markdown(_summary(past_budget=past), [SHARD], [], {}).splitlines() if "Budget" in r
    ]
    assert [_cells(r) for r in rows] == [[" Budget ", f" **{text(past)}** "]]
    assert "Budget" not in run_markdown(_summary(), [SHARD], [], {}), "within its budget: no row"


def test_the_plan_report_shows_figures_as_shardwise_plan_prints_them_never_raw_floats() -> None:
    report = {"cost_usd_high": 0.0006841986217962972, "device_hours": 0.00012345678, "rows": 12345}
    shown = {_cells(r)[0].strip(): _cells(r)[1].strip() for r in plan_markdown(report).splitlines()[4:]}
    assert shown == {"cost\\_usd\\_high": "$0.0006842", "device\\_hours": "0.0001", "rows": "12,345"}
