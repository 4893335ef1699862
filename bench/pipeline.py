"""Pipeline benchmark: PostgreSQL -> model -> results table, against the engine alone on the same rows.

    python bench/pipeline.py --corpus ../shared/corpus/python_docs.parquet --limit 3000 --model minilm --json
    python bench/pipeline.py --memory 100000 1000000      # peak RSS, tiny model, 16 shards

The first form loads the rows into a fresh PostgreSQL table, then measures in
one process: the engine on the texts held in memory (the ceiling), and the
whole pipeline (plan, stream from PostgreSQL under one snapshot, score,
stage with COPY, merge exactly once, ledger). ``ratio`` = pipeline / engine.
Whole processes, ``shardwise run`` against a plain script, are
``bench/whole.py``'s. The second form runs the pipeline on tables of each size in a fresh
subprocess and prints each one's peak resident memory: it should not grow
with the table. This prints figures; it is not a timed test.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardwise.environment import set_defaults

set_defaults(prefect=False)

import sqlalchemy as sa
import torch

from bench.engine import load_texts
from shardwise import Engine, EngineConfig, resolve_device
from shardwise.models import get_spec
from shardwise.pipeline import (
    ModelChoice,
    ResultsSpec,
    RunSettings,
    RunSpec,
    SourceSpec,
    WorkerCache,
    prepare_run,
    score_pending,
)

ADMIN_URL = "postgresql+psycopg://root@127.0.0.1:5432/test"


def fresh_database(admin_url: str) -> str:
    name = f"swbench_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return admin_url.rsplit("/", 1)[0] + "/" + name


def drop_database(admin_url: str, url: str) -> None:
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)'))
    engine.dispose()


def load_table(url: str, texts: list[str]) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("create table docs (id bigint primary key, text text)"))
        conn.execute(
            sa.text("insert into docs values (:id, :text)"),
            [{"id": i, "text": t} for i, t in enumerate(texts)],
        )
    engine.dispose()


def synthetic_table(url: str, rows: int) -> None:
    """Rows generated inside PostgreSQL: varied lengths, no text shipped or downloaded."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "create table docs as select i::bigint as id, "
                "'row ' || i || ' ' || "
                "repeat('alpha beta gamma ', 1 + ((i::bigint * 7919) % 40)::int) as text "
                "from generate_series(1, :n) as i"
            ),
            {"n": rows},
        )
        conn.execute(sa.text("alter table docs add primary key (id)"))
    engine.dispose()


def run_pipeline(
    url: str, model: str, device: str, rows_per_shard: int | None, shards: int | None = None
) -> tuple[float, dict]:
    spec = RunSpec(
        source=SourceSpec(location=url, table="docs"),
        results=ResultsSpec(location=url, table="bench_results"),
        model=ModelChoice(name=model),
        run=RunSettings(rows_per_shard=rows_per_shard, shards=shards, device=device),
    )
    cache = WorkerCache(get_spec)
    # loaded before the clock starts, as the engine's was
    cache.model(ModelChoice(name=model), resolve_device(device))
    started = time.perf_counter()
    planned = prepare_run(
        spec,
        run_id=str(uuid.uuid4()),
        started_by="bench",
        parameters={},
        model=get_spec(model).describe(),
        cache=cache,
    )
    try:
        counts = score_pending(planned, cache)
    finally:
        planned.close()
        cache.close()
    return time.perf_counter() - started, {"rows_out": counts.rows_out, "shards": counts.shards_done}


def throughput(args: argparse.Namespace) -> dict:
    texts = load_texts(args.corpus, args.text_column, args.limit)
    device = resolve_device(args.device)
    model = get_spec(args.model).load(device)
    url = fresh_database(args.admin_url)
    try:
        load_table(url, texts)
        # The engine alone in the precision the pipeline's auto picks, so the ratio compares like with like.
        config = EngineConfig(precision="auto")
        list(Engine(model, config).run(enumerate(texts[:64])))  # warm-up
        started = time.perf_counter()
        list(Engine(model, config).run(enumerate(texts)))
        engine_s = time.perf_counter() - started
        pipeline_s, counts = run_pipeline(url, args.model, args.device, args.rows_per_shard)
    finally:
        drop_database(args.admin_url, url)
    result = {
        "rows": len(texts),
        "engine_rows_per_s": len(texts) / engine_s,
        "pipeline_rows_per_s": len(texts) / pipeline_s,
        "ratio": engine_s / pipeline_s,
        **counts,
    }
    print(
        f"{len(texts)} rows, model {model.name}, {torch.get_num_threads()} threads: engine only "
        f"{result['engine_rows_per_s']:.1f} rows/s, PostgreSQL -> model -> results "
        f"{result['pipeline_rows_per_s']:.1f} rows/s, ratio {result['ratio']:.3f}"
    )
    return result


def memory(args: argparse.Namespace) -> dict:
    out = {}
    for rows in args.memory:
        proc = subprocess.run(
            [sys.executable, __file__, "--one-memory-run", str(rows), "--admin-url", args.admin_url],
            capture_output=True,
            text=True,
        )
        if proc.returncode:
            raise SystemExit(f"the {rows}-row run failed:\n{proc.stderr[-3000:]}")
        measured = json.loads(proc.stdout.strip().splitlines()[-1])
        out[str(rows)] = measured
        print(
            f"{rows} rows (tiny, {measured['shards']} shards): peak RSS {measured['peak_rss_mib']:.0f} MiB, "
            f"{measured['rows_per_s']:.0f} rows/s through the pipeline; left open afterwards: "
            f"{measured['threads_left']} threads, {measured['connections_left']} database connections"
        )
    sizes = [out[str(r)]["peak_rss_mib"] for r in args.memory]
    ratio = sizes[-1] / sizes[0]
    print(f"peak RSS grows {ratio:.2f}x from {args.memory[0]} to {args.memory[-1]} rows")
    return {
        "peak_rss_mib": {k: v["peak_rss_mib"] for k, v in out.items()},
        "rows_per_s": {k: v["rows_per_s"] for k, v in out.items()},
        "rss_growth": ratio,
        "left_open": {k: (v["threads_left"], v["connections_left"]) for k, v in out.items()},
    }


def one_memory_run(rows: int, admin_url: str) -> None:
    """One run in this (fresh) process: its peak RSS, rows/s, and what it left open afterwards."""
    url = fresh_database(admin_url)
    try:
        synthetic_table(url, rows)
        threads = threading.active_count()
        seconds, counts = run_pipeline(url, "tiny", "cpu", None, shards=MEMORY_SHARDS)
        left_threads = threading.active_count() - threads
        left_connections = _connections(admin_url, sa.make_url(url).database or "")
    finally:
        drop_database(admin_url, url)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "rows": counts["rows_out"],
                "shards": counts["shards"],
                "peak_rss_mib": peak_kib / 1024,
                "rows_per_s": rows / seconds,
                "threads_left": left_threads,
                "connections_left": left_connections,
            }
        )
    )


MEMORY_SHARDS = 16


def _connections(admin_url: str, database: str) -> int:
    """Sessions still open on ``database`` (other than the one asking)."""
    engine = sa.create_engine(admin_url)
    try:
        with engine.connect() as conn:
            query = "SELECT count(*) FROM pg_stat_activity WHERE datname = :db AND pid <> pg_backend_pid()"
            return int(conn.execute(sa.text(query), {"db": database}).scalar_one())
    finally:
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus")
    parser.add_argument("--text-column", default="text")
    parser.add_argument("--limit", type=int, default=3000)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--rows-per-shard", type=int, default=1000)
    parser.add_argument("--admin-url", default=ADMIN_URL)
    parser.add_argument(
        "--memory", type=int, nargs="+", metavar="ROWS", help="peak-memory runs at these sizes"
    )
    parser.add_argument("--one-memory-run", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.one_memory_run:
        one_memory_run(args.one_memory_run, args.admin_url)
        return
    result = memory(args) if args.memory else throughput(args)
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
