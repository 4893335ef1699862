"""ParquetSink on a local directory and on S3 (moto): a manifest entry created exclusively commits a chunk."""

from __future__ import annotations

import re

import pyarrow.parquet as pq
import pytest

from shardwise.errors import ConfigError
from shardwise.sinks.lake import arrow_schema, rows_table
from shardwise.sinks.parquet.sink import ParquetSink
from shardwise.testing.rows import LAYOUT, ROWS_PER_CHUNK, chunk
from shardwise.testing.sink import (
    SinkPlace,
    check_committed_inputs,
    check_kill_mid_commit,
    stale_commit_meets_the_seal,
)


def test_a_chunk_commits_as_a_manifest_entry_naming_its_data_file(location: str) -> None:
    sink = ParquetSink(location, "res", LAYOUT)
    sink.ensure()
    sink.commit(chunk(0))
    (listed,) = sink.manifest_files()
    assert re.fullmatch(r"data/run-a-s00000-c00000-[0-9a-f]{12}\.parquet", listed), listed


def test_a_stale_commit_in_flight_when_the_shard_is_sealed_writes_nothing(location: str) -> None:
    sink = stale_commit_meets_the_seal(SinkPlace("parquet", location), "_committed")
    assert sink._store().names("data") == sink.manifest_files()  # the stale writer deleted its own file


def test_committed_inputs_take_the_latest_scoring_of_each_key(location: str) -> None:
    sink = check_committed_inputs(SinkPlace("parquet", location))
    rescored = sink.commit(chunk(0, run_id="run-b", keys=range(25, 75), fingerprint="fp2"))
    assert (rescored.inserted, rescored.updated, rescored.unchanged) == (50, 0, 0)
    inputs = dict(sink.committed_inputs("v1"))
    assert len(inputs) == 75
    assert {inputs[str(k)] for k in range(25)} == {"fp"}
    assert {inputs[str(k)] for k in range(25, 75)} == {"fp2"}
    assert len(sink.read("v1")) == 100  # append-only: the old rows stay


@pytest.mark.slow
def test_a_writer_killed_mid_run_leaves_each_chunk_once_after_recommitting(location: str) -> None:
    sink = check_kill_mid_commit(SinkPlace("parquet", location))
    listed = sink.manifest_files()
    assert [name[: len("data/run-a-s00000-c00000")] for name in listed] == [
        f"data/run-a-s00000-c{n:05d}" for n in range(12)
    ]
    sink.finish("run-a")  # the file the killed writer published but never listed is gone
    assert sorted(sink._store().names("data")) == sorted(listed)


def test_a_data_file_without_its_manifest_entry_is_not_read_until_committed(tmp_path) -> None:
    sink = ParquetSink(str(tmp_path), "res", LAYOUT)
    sink.ensure()
    sink.commit(chunk(0))
    crashed = chunk(1)  # as if killed between the rename and the manifest entry
    table = rows_table(crashed.rows, crashed.lineage, LAYOUT, arrow_schema(LAYOUT))
    pq.write_table(table, tmp_path / "res" / "data" / "run-a-s00000-c00001.parquet")
    assert len(sink.read()) == ROWS_PER_CHUNK
    assert len(list(sink.committed_inputs("v1"))) == ROWS_PER_CHUNK
    assert sink.committed("run-a", 0, 1) is None
    assert sink.commit(chunk(1)).status == "written"
    assert [r["source_key"] for r in sink.read()] == list(range(2 * ROWS_PER_CHUNK))
    assert sink.finish("run-a") == ["deleted 1 data file(s) of run run-a that no manifest entry lists"]
    assert sorted(p.name for p in (tmp_path / "res" / "data").iterdir()) == sorted(
        name.removeprefix("data/") for name in sink.manifest_files()
    )
    assert sink.finish("run-a") == []


def test_run_ids_that_cannot_name_a_file_are_refused(tmp_path) -> None:
    sink = ParquetSink(str(tmp_path), "res", LAYOUT)
    sink.ensure()
    with pytest.raises(ConfigError, match="cannot name a file"):
        sink.commit(chunk(0, run_id="../escape"))


def test_a_closed_sink_says_so(tmp_path) -> None:
    sink = ParquetSink(str(tmp_path), "res", LAYOUT)
    sink.close()
    with pytest.raises(ConfigError, match="closed"):
        sink.ensure()
