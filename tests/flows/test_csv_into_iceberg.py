"""A folder of CSV files with bad rows, scored into an Iceberg table (both connectors of issue 35 at once):
one row per valid source row; killed with SIGKILL mid-shard then resumed, the rows of a clean run; a
second ``--only-new`` run commits nothing new. In a local warehouse with the default SQLite catalog, and
in a warehouse on moto's S3 with an SQLite catalog file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from test_sinks_killed import COUNTED, ROWS_PER_S, _kill_mid_shard, _run

from shardwise.models import get_spec
from shardwise.sinks.base import Layout
from shardwise.sinks.iceberg.sink import IcebergSink

BAD_LINES = 3
"""Per folder: a line with a field too many, a row with an empty key, and a key repeated in two files."""


def _csv_folder(folder: Path, rows: int, files: int = 3) -> set[int]:
    """``files`` CSV files of ``rows`` rows in all, with the bad rows of :data:`BAD_LINES`; the valid keys."""
    folder.mkdir(parents=True)
    per_file = rows // files
    valid: set[int] = set()
    for f in range(files):
        ids = range(f * per_file, (f + 1) * per_file)
        lines = ["id,text"] + [
            f'{i},"row {i}: {" ".join(["shard"] * (1 + i % 17))}, merged once"' for i in ids
        ]
        valid.update(ids)
        if f == 1:
            lines.insert(5, "999001,too,many,fields")  # not parsable: a field too many
            lines.insert(9, ',"a row without its key"')  # no key
            lines.append(f'{f * per_file - 1},"the same key as the last row of the file before"')
        (folder / f"part-{f}.csv").write_text("\n".join(lines) + "\n")
    valid.discard(per_file - 1)  # the repeated key: both of its rows are dead letters
    return valid


def _argv(source: Path, warehouse: str, table: str, *extra: str, shards: int = 2) -> list[str]:
    return [
        sys.executable, "-m", "shardwise.flows.cli", "run", "--source", str(source), "--model", "tiny",
        "--precision", "fp32", "--threads", "1", "--shards", str(shards), "--results", warehouse,
        "--results-format", "iceberg", "--results-table", table, *extra,
    ]  # fmt: skip


def _rows(warehouse: str, table: str, catalog: str | None = None) -> dict[int, np.ndarray]:
    sink = IcebergSink(warehouse, table, Layout(get_spec("tiny").describe().outputs, "int"), catalog=catalog)
    try:
        rows = sink.read()
    finally:
        sink.close()
    keys = [int(r["source_key"]) for r in rows]
    assert len(keys) == len(set(keys)), "a key was stored twice"
    return {int(r["source_key"]): np.asarray(r["embedding"], dtype=np.float32) for r in rows}


def _data_files(warehouse: str, table: str, catalog: str | None = None) -> int:
    sink = IcebergSink(warehouse, table, Layout(get_spec("tiny").describe().outputs, "int"), catalog=catalog)
    try:
        return sum(int((s.summary or {}).get("added-data-files") or 0) for s in sink._table().snapshots())
    finally:
        sink.close()


def test_csv_files_with_bad_rows_give_one_row_per_valid_row_and_only_new_adds_nothing(tmp_path: Path) -> None:
    valid = _csv_folder(tmp_path / "csv", 600)
    warehouse = str(tmp_path / "warehouse")
    out = _run([*_argv(tmp_path / "csv", warehouse, "ns.docs"), "--progress", "none"], dict(os.environ))
    assert "600 rows scored" not in out and f"{len(valid)} rows scored" in out, out
    assert "2 dead letters" in out, out  # the two rows of the repeated key; the other two are skipped
    stored = _rows(warehouse, "ns.docs")
    assert stored.keys() == valid
    files = _data_files(warehouse, "ns.docs")
    again = _run(
        [*_argv(tmp_path / "csv", warehouse, "ns.docs"), "--only-new", "--progress", "none"], {**os.environ}
    )
    assert "0 rows scored" in again, again
    assert _data_files(warehouse, "ns.docs") == files and _rows(warehouse, "ns.docs").keys() == valid


def _killed_then_resumed(tmp: Path, warehouse: str, extra: list[str], env: dict[str, str]) -> None:
    """Score the folder cleanly into a local table, then kill a paced run mid-shard into ``warehouse`` and
    resume it: the same keys and embeddings; then ``--only-new`` commits nothing new."""
    valid = _csv_folder(tmp / "csv", 20_000)
    clean_at = str(tmp / "clean")
    _run([*_argv(tmp / "csv", clean_at, "docs", shards=1), "--progress", "none"], env)
    clean = _rows(clean_at, "docs")
    assert clean.keys() == valid

    argv = _argv(tmp / "csv", warehouse, "lake.killed", *extra, shards=1)  # the killer reads "0/1 shard"
    paced = [sys.executable, str(COUNTED), str(tmp / "counts"), str(ROWS_PER_S), *argv[3:]]
    _kill_mid_shard([*paced, "--lease-s", "2", "--progress", "lines", "--progress-every", "0.2"], env)
    ledger = extra[extra.index("--ledger") + 1]
    runs = subprocess.run(
        [sys.executable, "-m", "shardwise.flows.cli", "runs", "--ledger", ledger],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert runs.returncode == 0, runs.stderr
    run_id = re.search(r"^(\S+)\s+(running|abandoned)", runs.stdout, re.MULTILINE)
    assert run_id, runs.stdout
    time.sleep(2)  # its lease (--lease-s 2) runs out: the run is abandoned, and a resume may take it
    _run([*argv, "--resume", run_id.group(1), "--progress", "none"], env)

    catalog = extra[extra.index("--iceberg-catalog") + 1] if "--iceberg-catalog" in extra else None
    saved = {k: os.environ.get(k) for k in env if k.startswith("AWS_")}
    os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
    try:
        stored = _rows(warehouse, "lake.killed", catalog)
        assert stored.keys() == clean.keys()
        assert all(np.array_equal(stored[k], clean[k]) for k in clean), "the clean run's embeddings"
        files = _data_files(warehouse, "lake.killed", catalog)
        again = _run([*argv, "--only-new", "--progress", "none"], env)
        assert "0 rows scored" in again, again
        assert _data_files(warehouse, "lake.killed", catalog) == files
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.slow
def test_killed_mid_shard_then_resumed_from_csv_into_a_local_warehouse(tmp_path: Path) -> None:
    ledger = ["--ledger", f"sqlite:///{tmp_path / 'ledger.db'}"]
    _killed_then_resumed(tmp_path, str(tmp_path / "warehouse"), ledger, dict(os.environ))


@pytest.mark.slow
@pytest.mark.s3
def test_killed_mid_shard_then_resumed_from_csv_into_a_warehouse_on_s3(
    tmp_path: Path, moto_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    bucket = f"sw-{uuid.uuid4().hex[:12]}"
    aws = {"AWS_ENDPOINT_URL": moto_url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    aws["AWS_DEFAULT_REGION"] = "us-east-1"
    for name, value in aws.items():
        monkeypatch.setenv(name, value)  # this process creates the bucket and reads the table too
    boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1").create_bucket(Bucket=bucket)
    extra = ["--iceberg-catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    extra += ["--ledger", f"sqlite:///{tmp_path / 'ledger.db'}"]
    _killed_then_resumed(tmp_path, f"s3://{bucket}/warehouse", extra, {**os.environ, **aws})
