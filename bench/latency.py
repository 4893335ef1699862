"""Triggered latency: one row inserted into a watched PostgreSQL table, until its result is in the table.

    python bench/latency.py --pg postgresql+psycopg://root@127.0.0.1:5432/test --inserts 5

It starts ``prefect server start`` on a free loopback port (or uses
``PREFECT_API_URL`` when set), then, for each mode, ``shardwise serve`` and
``shardwise watch --install-trigger`` on a database of its own (created and
dropped here), with the checkout's ``prefect.yaml`` (model ``minilm`` unless
``--model``). One untimed insert warms up (Prefect's caches, the calibration
file, the first run scoring the seed rows); then each of ``--inserts`` rows is
inserted alone, and the next waits until it is scored. Modes:

* ``before``: what ``serve`` and ``watch`` did before the warm path: every run
  in a fresh process (``serve --cold``), Prefect's runner polling every 10 s,
  a 2 s debounce;
* ``cold``: a fresh process per run, with the new poll and debounce defaults;
* ``warm``: the defaults now: triggered runs in the ``serve`` process.

For each insert it prints the latency (insert → result row seen, polled every
50 ms) and where it went, from the watcher's output and the flow run's states
and task runs on the server: the watcher (debounce and NOTIFY), Prefect's
trigger (event → flow run created), the pick-up (created → Pending: the
poll), the start (Pending → Running: a process, imports), planning (→ the
plan-run task's end), the shard (→ the infer-shard task's end: scoring, and a
model load where there is one) and the commit becoming visible. Then the
medians, the speed-up of each mode over ``before`` as a ratio of medians, and
the load average around each mode. Ends with one JSON line. It prints
figures; it is not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.services import ROOT, child, database, prefect_server, stop
from shardwise.environment import set_defaults

MODES: dict[str, dict[str, list[str]]] = {
    "before": {"serve": ["--cold", "--poll", "10"], "watch": ["--debounce", "2"]},
    "cold": {"serve": ["--cold"], "watch": []},
    "warm": {"serve": [], "watch": []},
}
PHASES = ("watcher", "trigger", "pick_up", "start", "plan", "shard", "visible")


def insert_and_wait(engine: sa.Engine, key: int, timeout: float) -> tuple[float, float, str]:
    """Insert row ``key``; return the insert's time, the time its result was seen, and the run id."""
    with engine.begin() as conn:
        inserted = time.time()
        conn.execute(
            sa.text("insert into docs (id, text) values (:k, :t)"), {"k": key, "t": f"row {key} landed"}
        )
    query = sa.text("select run_id from shardwise_results where source_key = :k")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with engine.connect() as conn:
                found = conn.execute(query, {"k": key}).scalar()
        except sa.exc.ProgrammingError:
            found = None  # the results table does not exist before the first run
        if found is not None:
            return inserted, time.time(), str(found)
        time.sleep(0.05)
    raise TimeoutError(f"row {key} was not scored within {timeout} s")


def warm_up(engine: sa.Engine) -> None:
    """Untimed inserts until one is scored: Prefect's caches warm up and the seed rows get scored.

    Retried, because the server may take a moment to act on a trigger it was just given.
    """
    for attempt in range(10):
        try:
            insert_and_wait(engine, 999_000 + attempt, 30)
            return
        except TimeoutError:
            continue
    raise TimeoutError("no warm-up insert was scored in 10 tries of 30 s")


def wait_idle(timeout: float = 300) -> None:
    """Until no flow run is starting, running or queued behind the concurrency limit (the warm-up's)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateName

    busy = FlowRunFilterStateName(any_=["Pending", "Running", "AwaitingConcurrencySlot"])
    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while client.read_flow_runs(flow_run_filter=FlowRunFilter(state=FlowRunFilterState(name=busy))):
            if time.monotonic() > deadline:
                raise TimeoutError(f"flow runs still busy after {timeout} s")
            time.sleep(0.5)


def run_marks(run_id: str) -> dict[str, float]:
    """When the flow run was created, went Pending, Running, and its tasks ended (epoch seconds); read
    once the run has ended."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(uuid.UUID(run_id))
        deadline = time.monotonic() + 120
        while not (flow_run.state and flow_run.state.is_final()) and time.monotonic() < deadline:
            time.sleep(0.2)  # the row is visible before the shard task's end is recorded
            flow_run = client.read_flow_run(flow_run.id)
        assert flow_run.created is not None  # the server sets it
        marks = {"created": flow_run.created.timestamp()}
        for state in client.read_flow_run_states(flow_run.id):
            marks.setdefault(state.type.value.lower(), state.timestamp.timestamp())
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id])))
        for task in tasks:
            label = {"plan-run": "planned", "shard": "shard_end"}.get(task.name.rsplit("-", 1)[0])
            if task.end_time is not None and label is not None:
                marks[label] = max(marks.get(label, 0.0), task.end_time.timestamp())
    return marks


def phases(inserted: float, emitted: float, scored: float, marks: dict[str, float]) -> dict[str, float]:
    points = [
        inserted,
        emitted,
        marks["created"],
        marks.get("pending", marks["created"]),
        marks["running"],
        marks.get("planned", marks["running"]),
        min(scored, marks.get("shard_end", marks.get("planned", marks["running"]))),
        scored,
    ]
    return {name: round(points[i + 1] - points[i], 3) for i, name in enumerate(PHASES)}


def measure(mode: str, admin: str, api: str, args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()
    with database(admin) as url:
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.execute(sa.text("create table docs (id bigint primary key, text text)"))
            conn.execute(
                sa.text("insert into docs (id, text) values (:k, :t)"),
                [{"k": k, "t": f"seed row {k}"} for k in range(1, args.seed_rows + 1)],
            )
        env = {**os.environ, "PREFECT_API_URL": api, "SHARDWISE_SOURCE_URL": url}
        serve_argv = ["serve", *MODES[mode]["serve"]]
        if args.model != "minilm":
            serve_argv += ["--prefect-yaml", str(with_model(args.model))]
        serving, serve_out = child(serve_argv, env, "serve", args.verbose)
        watch_argv = ["watch", "--source", "env:SHARDWISE_SOURCE_URL", "--table", "docs", "--name", "docs"]
        watching, watch_out = child(
            [*watch_argv, "--install-trigger", *MODES[mode]["watch"]], env, "watch", args.verbose
        )
        try:
            serve_out.wait_for("serving ", 180)
            watch_out.wait_for("watching docs", 180)
            warm_up(engine)
            wait_idle()
            rows: list[dict[str, Any]] = []
            for i in range(args.inserts):
                time.sleep(1.0)  # the watcher and serve idle, as between real inserts
                key = 1_000_001 + i
                inserted, scored, run_id = insert_and_wait(engine, key, 300)
                emitted = watch_out.wait_for("emitted shardwise.data.landed", 5, after=inserted)
                row: dict[str, Any] = {"latency_s": round(scored - inserted, 3), "run_id": run_id}
                row.update(phases(inserted, emitted, scored, run_marks(run_id)))
                rows.append(row)
                print(
                    f"{mode} insert {i + 1}: {row['latency_s']:.2f} s  "
                    + "  ".join(f"{p} {row[p]:.2f}" for p in PHASES),
                    flush=True,
                )
        finally:
            stop(watching)
            stop(serving)
            engine.dispose()
    latencies = [r["latency_s"] for r in rows]
    return {
        "mode": mode,
        "latencies_s": latencies,
        "median_s": statistics.median(latencies),
        "phases_median_s": {p: round(statistics.median(r[p] for r in rows), 3) for p in PHASES},
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "runs": rows,
    }


def with_model(model: str) -> Path:
    """A copy of prefect.yaml whose deployments score with ``model``."""
    import yaml

    data = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    for deployment in data["deployments"]:
        for block in [
            deployment.get("parameters") or {},
            *[t["parameters"] for t in deployment.get("triggers") or []],
        ]:
            if "params" in block:
                block["params"]["model"] = {"name": model}
    out = Path(tempfile.mkdtemp(prefix="lat-yaml-")) / "prefect.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default="postgresql+psycopg://root@127.0.0.1:5432/test", help="admin URL")
    parser.add_argument("--inserts", type=int, default=5)
    parser.add_argument("--seed-rows", type=int, default=100)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--modes", default="before,cold,warm", help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--verbose", action="store_true", help="echo the children's output")
    args = parser.parse_args()
    set_defaults()
    modes = args.modes.split(",")
    results = []
    with prefect_server(args.verbose) as api:
        os.environ["PREFECT_API_URL"] = api
        for mode in modes:
            results.append(measure(mode, args.pg, api, args))
    print()
    by_mode = {r["mode"]: r for r in results}
    for r in results:
        ratio = by_mode["before"]["median_s"] / r["median_s"] if "before" in by_mode else None
        each = ", ".join(f"{x:.2f}" for x in r["latencies_s"])
        print(
            f"{r['mode']:>6}: median {r['median_s']:.2f} s of {each}"
            + (f"; {ratio:.1f}x faster than before" if ratio and r["mode"] != "before" else "")
            + f"; load {r['load_before'][0]:.2f} -> {r['load_after'][0]:.2f}"
        )
        print(
            "        median per phase: "
            + ", ".join(f"{p} {s:.2f} s" for p, s in r["phases_median_s"].items())
        )
    print(json.dumps({"cpus": os.cpu_count(), "model": args.model, "modes": results}))


if __name__ == "__main__":
    main()
