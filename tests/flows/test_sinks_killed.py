"""``shardwise run`` killed with SIGKILL mid-shard, for every sink: ``--resume`` is exact (one row per valid
source row, the embeddings of an uninterrupted run into SQL), and ``--only-new`` then scores nothing."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flow_data import execute, make_docs
from spec_builder import flat_spec

from shardwise.models import get_spec
from shardwise.pipeline.destination import results_place
from shardwise.sinks import Layout

pytestmark = pytest.mark.slow

ROWS = 20_000
ROWS_PER_S = 8000  # the killed run is paced (counted_cli.py), so a busy machine still shows progress first
COUNTED = Path(__file__).with_name("counted_cli.py")


def _argv(source: str, *extra: str) -> list[str]:
    model = ["--model", "tiny", "--precision", "fp32", "--threads", "1", "--shards", "1"]
    return [
        sys.executable,
        "-m",
        "shardwise.flows.cli",
        "run",
        "--source",
        source,
        "--table",
        "docs",
        *model,
        *extra,
    ]


def _kill_mid_shard(argv: list[str], env: dict[str, str]) -> None:
    """Start the command and SIGKILL it once its progress shows rows scored, before the shard is done."""
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    killed = False
    for line in proc.stderr:
        done = re.search(r"progress: 0/1 shard, ([\d,]+)/", line)
        if done and int(done.group(1).replace(",", "")) > 0:
            os.kill(proc.pid, signal.SIGKILL)
            killed = True
            break
    proc.wait()
    assert killed, "the run ended before it could be killed mid-shard"


def _run(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _stored(results: str, table: str, fmt: str | None, env: dict[str, str]) -> dict[int, np.ndarray]:
    """The sink's rows, read through the sink itself: key → embedding."""
    spec = flat_spec(source=results, results=results, results_table=table, results_format=fmt)  # type: ignore[arg-type]
    saved = {k: os.environ.get(k) for k in env if k.startswith("AWS_")}
    os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
    try:
        sink = results_place(spec, results).open(Layout(get_spec("tiny").describe().outputs, "int"))
        try:
            rows = sink.read()
        finally:
            sink.close()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    keys = [int(r["source_key"]) for r in rows]
    assert len(keys) == len(set(keys)), "a key was stored twice"
    return {int(r["source_key"]): np.asarray(r["embedding"], dtype=np.float32) for r in rows}


def _parquet_files(results: str, table: str, env: dict[str, str]) -> tuple[list[str], bool]:
    """(temporary files, whether the data files are exactly those the manifest lists) of a Parquet table."""
    from shardwise.sinks.parquet.sink import ParquetSink

    saved = {k: os.environ.get(k) for k in env if k.startswith("AWS_")}
    os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
    try:
        sink = ParquetSink(results, table, Layout(get_spec("tiny").describe().outputs, "int"))
        try:
            store = sink._store()
            return store.names("_tmp"), sorted(store.names("data")) == sorted(sink.manifest_files())
        finally:
            sink.close()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


Where = Callable[[Path], tuple[list[str], str, str | None, dict[str, str]]]
"""A sink's options for a test folder: (run options, results, results format, extra environment)."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[int, np.ndarray]]]:
    """The source table, and an uninterrupted run of it into a SQL results table."""
    folder = tmp_path_factory.mktemp("killed-source")
    source = f"sqlite:///{folder / 'source.db'}"
    make_docs(source, ROWS)  # and three bad rows
    _run(_argv(source, "--results-table", "clean"), dict(os.environ))
    rows = execute(source, "select source_key, embedding from clean")
    yield source, {int(k): np.frombuffer(v, dtype=np.float32) for k, v in rows}


def _apart(tmp: Path) -> tuple[list[str], str, str | None, dict[str, str]]:
    results = f"sqlite:///{tmp / 'results.db'}"
    return ["--results", results, "--ledger", f"sqlite:///{tmp / 'ledger.db'}"], results, None, {}


def _check_killed_then_resumed(
    reference: tuple[str, dict[int, np.ndarray]],
    tmp: Path,
    where: tuple[list[str], str, str | None, dict[str, str]],
) -> None:
    source, clean = reference
    options, results, fmt, extra = where
    env = {**os.environ, **extra}
    argv = _argv(source, *options, "--results-table", "killed")
    paced = [sys.executable, str(COUNTED), str(tmp / "counts"), str(ROWS_PER_S), *argv[3:]]
    _kill_mid_shard([*paced, "--lease-s", "2", "--progress", "lines", "--progress-every", "0.2"], env)
    # The ledger: as given, else the results database, else the source database (a SQL source here).
    found = options[options.index("--ledger") + 1] if "--ledger" in options else None
    ledger = [
        "--ledger",
        found or (results if "://" in results and not results.startswith("s3:") else source),
    ]
    runs = subprocess.run(
        [sys.executable, "-m", "shardwise.flows.cli", "runs", "--results", results, *ledger],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert runs.returncode == 0, runs.stderr
    run_id = re.search(r"^(\S+)\s+(running|abandoned)", runs.stdout, re.MULTILINE)
    assert run_id, runs.stdout
    time.sleep(2)  # its lease (--lease-s 2) runs out: the run is abandoned, and a resume may take it
    _run([*argv, "--resume", run_id.group(1), "--progress", "none"], env)

    stored = _stored(results, "killed", fmt, env)
    assert stored.keys() == clean.keys() and len(stored) == ROWS
    assert all(np.array_equal(stored[k], clean[k]) for k in clean)
    if fmt == "parquet":  # whatever the kill left half-made (a temporary file, an unlisted file) is gone
        assert _parquet_files(results, "killed", env) == ([], True)

    again = _run([*argv, "--only-new", "--progress", "none"], env)
    assert "0 rows scored" in again, again


def test_sql_results_with_the_ledger_apart(reference: Any, tmp_path: Path) -> None:
    _check_killed_then_resumed(reference, tmp_path, _apart(tmp_path))


@pytest.mark.postgres
def test_pgvector_with_an_hnsw_index(reference: Any, tmp_path: Path, pgvector_db_url: str) -> None:
    where = (["--results", pgvector_db_url, "--index", "hnsw"], pgvector_db_url, None, {})
    _check_killed_then_resumed(reference, tmp_path, where)
    (indexes,) = execute(pgvector_db_url, "select count(*) from pg_indexes where tablename = 'killed' "
                         "and indexdef like '%hnsw%'")  # fmt: skip
    assert indexes == (1,)


@pytest.mark.parametrize("fmt", ["delta", "parquet"])
def test_a_local_lake_folder(reference: Any, tmp_path: Path, fmt: str) -> None:
    lake = str(tmp_path / "lake")
    _check_killed_then_resumed(
        reference, tmp_path, (["--results", lake, "--results-format", fmt], lake, fmt, {})
    )
    assert not (tmp_path / "lake" / "shardwise_ledger.db").exists()  # the source database holds the ledger


@pytest.mark.s3
@pytest.mark.parametrize("fmt", ["delta", "parquet"])
def test_a_lake_on_s3(reference: Any, tmp_path: Path, moto_url: str, fmt: str) -> None:
    import boto3

    bucket = f"sw-{uuid.uuid4().hex[:12]}"
    env = {"AWS_ENDPOINT_URL": moto_url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    env["AWS_DEFAULT_REGION"] = "us-east-1"
    boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=bucket)  # fmt: skip
    lake, ledger = f"s3://{bucket}/lake", f"sqlite:///{tmp_path / 'ledger.db'}"
    options = ["--results", lake, "--results-format", fmt, "--ledger", ledger]
    _check_killed_then_resumed(reference, tmp_path, (options, lake, fmt, env))
