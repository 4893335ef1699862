"""What a run costs, end to end on held-out rows: the plan's estimate against the run, and a budget.

    python bench/run_cost.py --corpus ../shared/corpus/python_docs.parquet --rows 300 --price 3.6

Takes the corpus' last ``--rows`` rows (held out: tests take the first ones)
into a SQLite table and, through the command line in this process, with a
generator (``--model PATH``, by default a tiny random Llama built here the
way the tests build theirs, see ``tests/hf_builders.py``):

1. ``shardwise plan --json``: prompt tokens, the completion bound, device-hours
   (unknown the first time) and the dollar range;
2. a run at ``--price`` dollars per device-hour, and ``shardwise runs --json``:
   the prompt tokens it counted, its cost, and whether the plan was within 1%;
3. the plan again (device-hours now known from that run), then a second run
   into another table: whether its cost falls in the plan's range;
4. a run with ``--budget-usd`` half the second plan's middle estimate: where it
   stopped, then ``--resume`` with ten times that: whether its results equal the
   unbudgeted run's, row for row.

It prints one line per step and, last, one JSON object. It prints figures; it is
not a timed test.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import polars as pl
import sqlalchemy as sa


def _main(argv: list[str]) -> tuple[int, str, str]:
    from shardwise.flows.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        found = [tuple(r) for r in conn.execute(sa.text(sql))]
    engine.dispose()
    return found


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    texts = pl.read_parquet(args.corpus).tail(args.rows)
    url = f"sqlite:///{work / 'docs.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("create table docs (id text primary key, text text)"))
        conn.execute(sa.text("insert into docs values (:id, :text)"), texts.select("id", "text").to_dicts())
    engine.dispose()
    model = args.model
    if model is None:
        from hf_builders import tiny_causal_lm

        model = str(tiny_causal_lm(work / "lm", context=4096))
    options = [
        "--source", url, "--table", "docs", "--model", model, "--precision", "fp32", "--shards", "2",
        "--max-new-tokens", str(args.max_new_tokens), "--chat", "off", "--device-price-per-hour",
        str(args.price),
    ]  # fmt: skip

    def plan(table: str) -> dict[str, Any]:
        code, out, err = _main(["plan", *options, "--results-table", table, "--json"])
        assert code == 0, err
        return dict(json.loads(out.splitlines()[-1]))

    def score(table: str, *more: str) -> tuple[int, str, dict[str, Any]]:
        code, out, err = _main(["run", *options, "--results-table", table, "--progress", "none", *more])
        _, listed, _ = _main(["runs", "--results", url, "--json", "--limit", "1"])
        return code, out + err, dict(json.loads(listed.splitlines()[0]))

    first_plan = plan("first")
    print(
        f"plan: {first_plan['rows']} rows, {first_plan['prompt_tokens']:,} prompt tokens "
        f"({first_plan['prompt_tokens_counted']}), at most {first_plan['max_completion_tokens']:,} "
        f"completion tokens, device-hours {first_plan['device_hours']}"
    )
    _, _, first = score("first")
    off = abs(first_plan["prompt_tokens"] - first["prompt_tokens"]) / first["prompt_tokens"]
    print(
        f"run: {first['prompt_tokens']:,} prompt tokens counted (plan off by {off:.3%}), "
        f"{first['completion_tokens']:,} completion tokens, {first['device_seconds']:.1f} device-s, "
        f"${first['cost_usd']:.6f}"
    )
    second_plan = plan("second")
    low, high = second_plan["cost_usd_low"], second_plan["cost_usd_high"]
    _, _, second = score("second")
    inside = low <= second["cost_usd"] <= high
    print(f"plan range ${low:.6f} to ${high:.6f}; second run ${second['cost_usd']:.6f}: inside {inside}")

    budget = (second_plan["device_hours"] * args.price) / 2
    code, said, stopped = score("budgeted", "--budget-usd", f"{budget:.8f}")
    (kept,) = _rows(url, "select count(*) from budgeted")[0]
    line = next((x for x in said.splitlines() if x.startswith("stopped: budget")), "")
    print(f"budget ${budget:.6f}: exit {code}, {kept} rows kept, ${stopped['cost_usd']:.6f} spent; {line}")
    code, _, resumed = score("budgeted", "--resume", stopped["run_id"], "--budget-usd", f"{budget * 10:.8f}")
    query = "select source_key, generated_text, prompt_tokens, completion_tokens from {} order by source_key"
    same = _rows(url, query.format("budgeted")) == _rows(url, query.format("first"))
    print(
        f"resume with ${budget * 10:.6f}: exit {code}, {resumed['status']}, equal to the unbudgeted: {same}"
    )
    return {
        "rows": args.rows,
        "plan_prompt_tokens": first_plan["prompt_tokens"],
        "run_prompt_tokens": first["prompt_tokens"],
        "plan_off": off,
        "max_completion_tokens": first_plan["max_completion_tokens"],
        "run_completion_tokens": first["completion_tokens"],
        "cost_usd_first": first["cost_usd"],
        "range_usd": [low, high],
        "cost_usd_second": second["cost_usd"],
        "inside_range": inside,
        "budget_usd": budget,
        "budget_rows_kept": kept,
        "budget_spent_usd": stopped["cost_usd"],
        "resumed_status": resumed["status"],
        "resumed_cost_usd": resumed["cost_usd"],
        "resumed_equals_unbudgeted": same,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--corpus", default=str(Path(__file__).resolve().parents[2] / "shared/corpus/python_docs.parquet")
    )
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--price", type=float, default=3.6, help="dollars per device-hour")
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--model", default=None, help="a causal LM directory (default: a tiny random Llama)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        print(json.dumps(run(args, Path(work))))


if __name__ == "__main__":
    main()
