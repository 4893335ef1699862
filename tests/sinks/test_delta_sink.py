"""DeltaSink on a local directory and on S3 (moto in its own process): each chunk once, the merge rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from shardwise.errors import ConfigError, TransientError
from shardwise.retry_policy import RetryPolicy
from shardwise.sinks.base import SinkChunk
from shardwise.sinks.delta.sink import DeltaSink, _boundary
from shardwise.testing.rows import LAYOUT, ROWS_PER_CHUNK, chunk, lineage, row
from shardwise.testing.sink import SinkPlace, stale_commit_meets_the_seal

HERE = Path(__file__).resolve().parent


def test_a_stale_commit_in_flight_when_the_shard_is_sealed_writes_nothing(location: str) -> None:
    stale_commit_meets_the_seal(SinkPlace("delta", location), "_existing")


def test_the_merge_rule_keeps_same_inputs_replaces_changed_ones_and_adds_versions(location: str) -> None:
    sink = DeltaSink(location, "res", LAYOUT)
    sink.ensure()
    sink.commit(chunk(0))
    same = sink.commit(chunk(0, run_id="run-b", salt="b"))
    assert (same.status, same.inserted, same.updated, same.unchanged) == ("written", 0, 0, ROWS_PER_CHUNK)
    changed = sink.commit(chunk(0, run_id="run-c", keys=range(25, 75), fingerprint="fp2", salt="c"))
    assert (changed.inserted, changed.updated, changed.unchanged) == (25, 25, 0)
    beside = sink.commit(chunk(0, run_id="run-d", model_version="v2"))
    assert (beside.inserted, beside.updated, beside.unchanged) == (ROWS_PER_CHUNK, 0, 0)
    assert sink.commit(chunk(0, run_id="run-b", salt="b")).status == "already"
    v1 = sink.read("v1")
    assert [r["source_key"] for r in v1] == list(range(75))
    assert {r["run_id"] for r in v1 if r["source_key"] < 25} == {"run-a"}
    assert {(r["run_id"], r["input_fingerprint"]) for r in v1 if r["source_key"] >= 25} == {("run-c", "fp2")}
    assert np.array_equal(v1[30]["embedding"], row(30, salt="c").values["embedding"])
    assert len(sink.read()) == 75 + ROWS_PER_CHUNK


def test_keys_repeated_in_a_chunk_keep_the_last_row(tmp_path) -> None:
    sink = DeltaSink(str(tmp_path), "res", LAYOUT)
    sink.ensure()
    rows = [row(1, "old"), row(2), row(1, "new")]
    done = sink.commit(SinkChunk("run-a", 0, 0, rows, lineage(), {"rows": 3, "key": 1}))
    assert done.inserted == 2
    assert [(r["source_key"], r["input_fingerprint"]) for r in sink.read()] == [(1, "new"), (2, "fp")]


def test_committing_before_ensure_says_what_to_do(tmp_path) -> None:
    with pytest.raises(ConfigError, match="call ensure"):
        DeltaSink(str(tmp_path), "res", LAYOUT).commit(chunk(0))


def test_a_lost_commit_race_is_a_transient_error() -> None:
    with pytest.raises(TransientError, match="concurrent writers"), _boundary("committing", "delta:/x/res"):
        raise CommitFailedError("Failed to commit transaction: 15")


@pytest.mark.parametrize("damage", ["truncated", "random bytes"])
def test_a_corrupt_log_is_one_line_naming_the_table_and_the_fix_and_is_not_retried(
    tmp_path, damage: str
) -> None:
    policy = RetryPolicy(deadline_s=600)  # a transient failure would be tried again for 10 minutes
    sink = DeltaSink(str(tmp_path), "res", LAYOUT, retry=policy)
    sink.ensure()
    sink.commit(chunk(0))
    sink.close()
    (last,) = sorted((tmp_path / "res" / "_delta_log").glob("*1.json"))
    text = last.read_bytes()
    last.write_bytes(text[: len(text) // 2] if damage == "truncated" else os.urandom(len(text)))
    for call in (
        lambda s: s.check(),
        lambda s: s.ensure(),
        lambda s: s.read(),
        lambda s: s.commit(chunk(1)),
    ):
        again = DeltaSink(str(tmp_path), "res", LAYOUT, retry=policy)
        started = time.monotonic()
        with pytest.raises(ConfigError) as caught:
            call(again)
        assert time.monotonic() - started < policy.deadline_s / 10, "a corrupt log was retried as transient"
        message = str(caught.value)
        assert f"Delta table delta:{tmp_path}/res has a corrupt log" in message, message
        assert "_delta_log" in message and "--results-table" in message and "\n" not in message
        assert "<unknown>" not in message, message  # no Rust backtrace


def test_bad_table_names_and_locations_are_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="plain identifier"):
        DeltaSink(str(tmp_path), "bad/name", LAYOUT)
    with pytest.raises(ConfigError, match="unsupported scheme"):
        DeltaSink("gs://bucket/x", "res", LAYOUT)


@pytest.mark.slow
def test_the_log_is_checkpointed_as_chunks_commit(tmp_path) -> None:
    sink = DeltaSink(str(tmp_path), "res", LAYOUT)
    sink.ensure()
    for number in range(100):
        sink.commit(chunk(number, keys=range(number, number + 1)))
    assert (tmp_path / "res" / "_delta_log" / "_last_checkpoint").exists()
    assert DeltaTable(str(tmp_path / "res")).version() == 100  # opens from the checkpoint


def test_a_chunk_of_8192_wide_vectors_converts_fast() -> None:
    from shardwise.model import OutputColumn
    from shardwise.records import ResultRow
    from shardwise.sinks.base import Layout
    from shardwise.sinks.lake import arrow_schema, rows_table
    from shardwise.testing.rows import lineage as make_lineage

    layout = Layout((OutputColumn("embedding", "vector", dim=384),), "int")
    vectors = np.random.default_rng(0).standard_normal((8192, 384)).astype(np.float32)
    rows = [ResultRow(i, {"embedding": vectors[i]}, "fp") for i in range(8192)]
    started = time.perf_counter()
    table = rows_table(rows, make_lineage(), layout, arrow_schema(layout))
    assert time.perf_counter() - started < 1.0
    flat = table.column("embedding").combine_chunks().flatten().to_numpy()
    assert np.array_equal(flat.reshape(8192, 384), vectors)


def test_two_runs_committing_the_same_new_keys_at_once_leave_one_row_per_key(location: str, tmp_path) -> None:
    """Two processes, two runs, one chunk of the same 50 new keys: both read the table before either
    commits (a gate holds each after its read), then both commit. One row per key, and the two commits'
    counts say the keys were inserted once."""
    DeltaSink(location, "res", LAYOUT).ensure()
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    runs = ["run-x", "run-y"]
    command = [sys.executable, str(HERE / "lake_child.py"), "race", location, "res"]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    children = [subprocess.Popen([*command, run, str(gate)], env=env, **pipes) for run in runs]
    deadline = time.monotonic() + 120
    while not all((gate / f"{run}.waiting").exists() for run in runs):
        assert time.monotonic() < deadline and all(c.poll() is None for c in children), [
            c.communicate() for c in children if c.poll() is not None
        ]
        time.sleep(0.02)
    (gate / "go").touch()  # both have read the table: neither saw the other's keys
    done = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err[-2000:]
        done.append(json.loads(out.splitlines()[-1]))
    rows = DeltaSink(location, "res", LAYOUT).read()
    assert [r["source_key"] for r in rows] == list(range(ROWS_PER_CHUNK))
    assert sum(d["counts"][0] for d in done) == ROWS_PER_CHUNK  # inserted once, by one of the runs
    assert sorted(d["counts"] for d in done) == [[0, 0, ROWS_PER_CHUNK], [ROWS_PER_CHUNK, 0, 0]]
