"""What a Parquet-sink writer killed mid-commit leaves behind is deleted by the next run of the table, and a
live writer's files never are (locally and on S3).

The process tests kill real runs with SIGKILL at a chosen point of a chunk's
write (``parquet_run_child.py``): after its data file is written under
``_tmp/``, or after it is published in ``data/`` and before its manifest entry.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flow_data import make_docs
from spec_builder import flat_fields, flat_spec

from shardwise.models import get_spec
from shardwise.pipeline import finish_results
from shardwise.sinks.base import Layout
from shardwise.sinks.lake_files import temp_name, temp_target
from shardwise.sinks.parquet.leftovers import ORPHAN_AGE_S
from shardwise.sinks.parquet.sink import ParquetSink
from shardwise.testing.rows import LAYOUT, chunk

HERE = Path(__file__).parent
ROWS, CHUNK = 300, 50


def _never(run_id: str) -> bool | None:
    return False


def test_a_temporary_name_says_which_file_it_becomes() -> None:
    name = "data/run-a.1_x-s00003-c00012-0123456789ab.parquet"
    assert temp_target(temp_name(name)) == name
    assert (
        temp_target(temp_name("_manifest/run-a/s00000-c00001.json")) == "_manifest/run-a/s00000-c00001.json"
    )
    assert temp_target(f"_tmp/{uuid.uuid4().hex}.parquet") is None  # an older release's: names no file


def test_tidy_deletes_only_what_runs_over_left(tmp_path: Path) -> None:
    sink = ParquetSink(str(tmp_path), "res", LAYOUT)
    sink.ensure()
    root = tmp_path / "res"
    for run in ("over", "live", "stranger"):
        sink.commit(chunk(0, run_id=run))
        (root / "data" / f"{run}-s00000-c00001-0123456789ab.parquet").write_bytes(b"a killed write")
        (root / temp_name(f"data/{run}-s00000-c00002-0123456789ab.parquet")).write_bytes(b"half a file")
    young, old = root / "_tmp" / f"{uuid.uuid4().hex}.parquet", root / "_tmp" / f"{uuid.uuid4().hex}.json"
    young.write_bytes(b"")
    old.write_bytes(b"")
    an_hour_ago = time.time() - ORPHAN_AGE_S - 60
    os.utime(old, (an_hour_ago, an_hour_ago))
    verdicts = {"over": True, "live": False}  # "stranger": a run another ledger recorded
    asked: list[str] = []

    def over(run: str) -> bool | None:
        asked.append(run)
        return verdicts.get(run)

    lines = sink.tidy(over)
    assert lines == [
        "deleted 1 data file(s) that no manifest entry lists, left by killed or finished writers (over)",
        "deleted 2 temporary file(s) never made visible, left by killed or finished writers "
        "(over, files naming no run, an hour old)",
    ]
    assert sorted(asked) == ["live", "over", "stranger"]  # once each; runs with nothing left are not asked
    left = sorted(str(p.relative_to(root)) for p in (root / "data").iterdir())
    assert left == sorted([*sink.manifest_files(), *(f"data/{r}-s00000-c00001-0123456789ab.parquet"
                                                     for r in ("live", "stranger"))])  # fmt: skip
    temps = sorted(p.name for p in (root / "_tmp").iterdir())
    assert young.name in temps and old.name not in temps
    assert {temp_target(f"_tmp/{t}").split("/")[1].split("-s")[0] for t in temps if t != young.name} == {
        "live",
        "stranger",
    }
    assert len(sink.read()) == 3 * 50  # what the manifest lists is untouched
    assert sink.tidy(over) == []


def test_a_data_file_a_tidier_deleted_before_its_entry_is_written_again(location: str) -> None:
    sink = ParquetSink(location, "res", LAYOUT)
    sink.ensure()
    store = sink._store()
    create = store.create

    def tidied_meanwhile(name: str, body: bytes) -> bool:
        # The writer paused between its file and its entry; a run judged its run over and tidied the file.
        assert sink.tidy(lambda run: True) == [
            "deleted 1 data file(s) that no manifest entry lists, left by killed or finished writers (run-a)"
        ]
        return create(name, body)

    store.create = tidied_meanwhile  # type: ignore[method-assign]
    assert sink.commit(chunk(0)).status == "written"
    (listed,) = sink.manifest_files()
    assert store.exists(listed)
    assert [r["source_key"] for r in sink.read()] == list(range(50))


# The process tests: real runs, killed with SIGKILL mid-commit.


def _spec(source: str, location: str, ledger: str, **fields: Any) -> dict[str, Any]:
    spec = {
        "source": source,
        "table": "docs",
        "model": "tiny",
        "precision": "fp32",
        "shards": 1,
        "chunk_rows": CHUNK,
        "results": location,
        "results_table": "res",
        "results_format": "parquet",
        "ledger": ledger,
        "lease_s": 2.0,
        "only_new": True,
        **fields,
    }
    flat_spec(**spec)  # checks itself
    return spec


class _Held:
    """A run in a child process, held at ``point`` of chunk 2's write (see parquet_run_child.py)."""

    def __init__(self, spec: dict[str, Any], run_id: str, point: str, gate: Path) -> None:
        gate.mkdir()
        self.gate, self.run_id = gate, run_id
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
        }
        command = [
            sys.executable,
            str(HERE / "parquet_run_child.py"),
            json.dumps(spec),
            run_id,
            point,
            str(gate),
        ]
        self.log = gate / "stderr.log"
        with open(self.log, "w") as err:  # a file, not a pipe: a chatty child never blocks on it
            self.proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        deadline = time.monotonic() + 120
        while not (gate / "held").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                pytest.fail(f"the run never reached its hold point: {self.log.read_text()[-3000:]}")
            time.sleep(0.02)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def go_on(self) -> str:
        (self.gate / "go").touch()
        out, _ = self.proc.communicate(timeout=120)
        assert self.proc.returncode == 0, self.log.read_text()[-3000:]
        return out


def _files(sink: ParquetSink) -> tuple[list[str], list[str]]:
    """(data files, temporary files) in the sink's table."""
    store = sink._store()
    return store.names("data"), store.names("_tmp")


def _embeddings(sink: ParquetSink) -> dict[int, np.ndarray]:
    rows = sink.read()
    keys = [int(r["source_key"]) for r in rows]
    assert len(keys) == len(set(keys)), "a key was stored twice"
    return {int(r["source_key"]): np.asarray(r["embedding"]) for r in rows}


@pytest.fixture
def source(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'source.db'}"
    make_docs(url, ROWS)  # and three bad rows: dead letters
    return url


def _layout() -> Layout:
    return Layout(get_spec("tiny").describe().outputs, "int")


@pytest.mark.slow
def test_the_next_run_deletes_what_killed_runs_left_and_the_results_are_exact(
    location: str, source: str, tmp_path: Path, pipeline: Any
) -> None:
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    clean = str(tmp_path / "clean")
    pipeline.run(flat_spec(**_spec(source, clean, ledger, only_new=False)), "clean")  # type: ignore[arg-type]
    expected = _embeddings(ParquetSink(clean, "res", _layout()))

    # Two runs killed mid-commit, one after the other: the first with its data file under _tmp/, the
    # second with it in data/ but unlisted. Each is the next run of the table for the one before it.
    spec = _spec(source, location, ledger)
    sink = ParquetSink(location, "res", _layout())
    _Held(spec, "killed-temp", "temp", tmp_path / "gate-1").kill()
    data, temps = _files(sink)
    assert len(temps) == 1 and "killed-temp-s00000-c00002" in temps[0], temps
    assert sorted(data) == sorted(sink.manifest_files())
    _Held(spec, "killed-unlisted", "unlisted", tmp_path / "gate-2").kill()
    data, temps = _files(sink)
    listed = sink.manifest_files()
    assert temps == []  # the second run deleted the first one's as it started
    assert [d for d in data if d not in listed] == [d for d in data if "killed-unlisted-s00000-c00002" in d]
    assert len(data) == len(listed) + 1

    planned = pipeline.plan(flat_spec(**spec), "next")  # type: ignore[arg-type]
    try:
        data, temps = _files(sink)  # gone as the run starts, before it scores anything
        assert temps == [] and sorted(data) == sorted(listed)
        assert planned.tidied == (
            "deleted 1 data file(s) that no manifest entry lists, left by killed or finished writers "
            "(killed-unlisted)",
        )
        pipeline.score(planned)
        assert finish_results(planned) == []
    finally:
        planned.close()
    data, temps = _files(sink)
    assert temps == [] and sorted(data) == sorted(sink.manifest_files())
    stored = _embeddings(sink)
    assert stored.keys() == expected.keys() == set(range(ROWS))
    assert all(np.array_equal(stored[k], expected[k]) for k in expected)


@pytest.mark.slow
def test_a_live_writers_files_are_never_deleted(
    location: str, source: str, tmp_path: Path, pipeline: Any
) -> None:
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    spec = _spec(source, location, ledger, only_new=False)
    live = _Held(spec, "live", "unlisted", tmp_path / "gate-1")  # its file in data/, its entry not yet made
    live_temp = _Held(spec, "live-temp", "temp", tmp_path / "gate-2")  # its file under _tmp/
    try:
        # Each run that starts now tidies the table: those two writers' files must survive every one.
        _Held(spec, "killed", "unlisted", tmp_path / "gate-3").kill()
        sink = ParquetSink(location, "res", _layout())
        data, temps = _files(sink)
        unlisted = sorted(set(data) - set(sink.manifest_files()))
        assert [name.split("-s0")[0] for name in unlisted] == ["data/killed", "data/live"]
        assert len(temps) == 1 and "live-temp-s00000-c00002" in temps[0]

        planned = pipeline.plan(flat_spec(**spec), "next")  # type: ignore[arg-type]
        planned.close()
        assert planned.tidied == (
            "deleted 1 data file(s) that no manifest entry lists, left by killed or finished writers "
            "(killed)",
        )
        data, temps = _files(sink)
        assert sorted(set(data) - set(sink.manifest_files())) == [unlisted[1]]  # the live writer's, kept
        assert len(temps) == 1 and "live-temp-s00000-c00002" in temps[0]
    finally:
        outs = [live.go_on(), live_temp.go_on()]
    assert outs == ["done live\n", "done live-temp\n"]
    data, temps = _files(sink)
    assert temps == [] and sorted(data) == sorted(sink.manifest_files())
    for run in ("live", "live-temp"):
        assert sorted(r["source_key"] for r in sink.read() if r["run_id"] == run) == list(range(ROWS))


def test_the_spec_fields_travel_as_json() -> None:
    # The child rebuilds its RunSpec from JSON: every field the tests set must survive the trip.
    spec = _spec("sqlite:///s.db", "lake", "sqlite:///l.db")
    assert {
        k: v for k, v in flat_fields(flat_spec(**json.loads(json.dumps(spec)))).items() if k in spec
    } == spec
