"""``shardwise run --results-format iceberg``: one row per valid source row in the Iceberg table; killed
with SIGKILL mid-shard then resumed, the same rows as a clean run; a second ``--only-new`` run commits
nothing new. Locally with the default SQLite catalog, and on moto's S3 with a PostgreSQL catalog."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flow_data import make_docs
from test_sinks_killed import COUNTED, ROWS, ROWS_PER_S, _argv, _kill_mid_shard, _run
from test_sinks_killed import reference as reference  # the module's fixture: a clean run into SQL

from shardwise.flows.cli import main
from shardwise.models import get_spec
from shardwise.sinks.base import Layout
from shardwise.sinks.iceberg.sink import IcebergSink


def _sink(warehouse: str, table: str, catalog: str | None = None) -> IcebergSink:
    return IcebergSink(warehouse, table, Layout(get_spec("tiny").describe().outputs, "int"), catalog=catalog)


def _rows(sink: IcebergSink) -> dict[int, np.ndarray]:
    rows = sink.read()
    keys = [int(r["source_key"]) for r in rows]
    assert len(keys) == len(set(keys)), "a key was stored twice"
    return {int(r["source_key"]): r["embedding"] for r in rows}


def _data_files_added(sink: IcebergSink) -> int:
    """How many data files the table's snapshots added, all told."""
    return sum(int((s.summary or {}).get("added-data-files") or 0) for s in sink._table().snapshots())


@pytest.mark.usefixtures("prefect_harness")
def test_a_run_gives_one_row_per_source_row_and_only_new_then_commits_nothing(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 120)  # and three bad rows, dead letters
    warehouse = tmp_path / "warehouse"
    argv = ["run", "--source", sqlite_url, "--table", "docs", "--model", "tiny", "--results", str(warehouse)]
    argv += ["--results-format", "iceberg", "--shards", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "completed: 120 rows scored" in out and "3 dead letters" in out, out
    assert f"iceberg:{warehouse}/shardwise_results" in out
    sink = _sink(str(warehouse), "shardwise_results")
    stored = _rows(sink)
    assert len(stored) == 120
    assert all(v.dtype == np.float32 and v.shape == stored[next(iter(stored))].shape for v in stored.values())
    (first_run,) = {r["run_id"] for r in sink.read()}
    files = _data_files_added(sink)

    assert main([*argv, "--only-new"]) == 0
    out = capsys.readouterr().out
    assert "0 rows scored" in out and "120 skipped" in out, out
    assert {r["run_id"] for r in sink.read()} == {first_run}
    assert _data_files_added(sink) == files  # no row written: at most the shards' seals, which are empty
    sink.close()


def _killed_then_resumed(
    reference: tuple[str, dict[int, np.ndarray]],
    tmp: Path,
    warehouse: str,
    options: list[str],
    env: dict[str, str],
) -> IcebergSink:
    """Kill a paced run of the reference source mid-shard, resume it, and check its rows are the clean
    run's; then a second ``--only-new`` run scores nothing and adds no data file. Returns the sink."""
    source, clean = reference
    argv = _argv(source, "--results", warehouse, "--results-format", "iceberg", *options)
    argv += ["--results-table", "lake.killed"]
    paced = [sys.executable, str(COUNTED), str(tmp / "counts"), str(ROWS_PER_S), *argv[3:]]
    _kill_mid_shard([*paced, "--lease-s", "2", "--progress", "lines", "--progress-every", "0.2"], env)
    ledger = options[options.index("--ledger") + 1] if "--ledger" in options else source
    runs = subprocess.run(
        [sys.executable, "-m", "shardwise.flows.cli", "runs", "--results", warehouse, "--ledger", ledger],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert runs.returncode == 0, runs.stderr
    run_id = re.search(r"^(\S+)\s+(running|abandoned)", runs.stdout, re.MULTILINE)
    assert run_id, runs.stdout
    time.sleep(2)  # its lease (--lease-s 2) runs out: the run is abandoned, and a resume may take it
    _run([*argv, "--resume", run_id.group(1), "--progress", "none"], env)

    catalog = options[options.index("--iceberg-catalog") + 1] if "--iceberg-catalog" in options else None
    sink = _sink(warehouse, "lake.killed", catalog)
    stored = _rows(sink)
    assert stored.keys() == clean.keys() and len(stored) == ROWS
    assert all(np.array_equal(stored[k], clean[k]) for k in clean)
    files = _data_files_added(sink)
    again = _run([*argv, "--only-new", "--progress", "none"], env)
    assert "0 rows scored" in again, again
    assert _data_files_added(sink) == files
    return sink


@pytest.mark.slow
def test_killed_mid_shard_then_resumed_in_a_local_warehouse(reference: Any, tmp_path: Path) -> None:
    warehouse = str(tmp_path / "warehouse")
    _killed_then_resumed(reference, tmp_path, warehouse, [], dict(os.environ)).close()
    assert (tmp_path / "warehouse" / "shardwise_iceberg_catalog.db").is_file()


@pytest.mark.slow
@pytest.mark.s3
@pytest.mark.postgres
def test_killed_mid_shard_then_resumed_on_s3_with_a_postgresql_catalog(
    reference: Any, tmp_path: Path, moto_url: str, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    bucket = f"sw-{uuid.uuid4().hex[:12]}"
    aws = {"AWS_ENDPOINT_URL": moto_url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    aws["AWS_DEFAULT_REGION"] = "us-east-1"
    for name, value in aws.items():
        monkeypatch.setenv(name, value)  # this process reads the table too
    boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1").create_bucket(Bucket=bucket)
    options = ["--iceberg-catalog", pg_url, "--ledger", f"sqlite:///{tmp_path / 'ledger.db'}"]
    sink = _killed_then_resumed(
        reference, tmp_path, f"s3://{bucket}/warehouse", options, {**os.environ, **aws}
    )
    assert sink._table().location().startswith(f"s3://{bucket}/warehouse/")
    sink.close()
