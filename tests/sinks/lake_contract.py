"""What every lake sink must do, as checks the Delta and Parquet test modules run on their own sink."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lake_rows import LAYOUT, OTHER_LAYOUT, ROWS_PER_CHUNK, chunk, vector

from shardwise.errors import ConfigError
from shardwise.sinks.base import Layout, Sink, SinkCommit

MakeSink = Callable[[str, str, Layout], Any]
HERE = Path(__file__).resolve().parent


def check_layout_refused(make: MakeSink, location: str) -> None:
    make(location, "res", LAYOUT).check()  # nothing there yet: nothing to refuse, nothing made
    sink = make(location, "res", LAYOUT)
    sink.ensure()
    sink.ensure()
    sink.check()
    other = make(location, "res", OTHER_LAYOUT)
    for step in (other.check, other.ensure):
        with pytest.raises(ConfigError, match=r"different layout: column 'source_key' .*--results-table"):
            step()


def check_commit_once(make: MakeSink, location: str) -> Sink:
    sink = make(location, "res", LAYOUT)
    sink.ensure()
    assert isinstance(sink, Sink)
    assert sink.committed("run-a", 0, 0) is None
    first = sink.commit(chunk(0))
    assert first == SinkCommit("written", {"rows": 50, "key": 49}, inserted=ROWS_PER_CHUNK)
    again = sink.commit(chunk(0, salt="again"))
    assert again == SinkCommit("already", {"rows": 50, "key": 49}, inserted=ROWS_PER_CHUNK)
    assert sink.committed("run-a", 0, 0) == again
    assert sink.committed("run-a", 0, 1) is None
    assert sink.committed("run-a", 1, 0) is None
    rows = sink.read()
    assert [r["source_key"] for r in rows] == list(range(ROWS_PER_CHUNK))
    for r in rows:
        assert r["embedding"].dtype == np.float32
        assert np.array_equal(r["embedding"], vector(r["source_key"]))
        assert r["extra"] == {"key": r["source_key"], "salt": "", "ü": [1, 2]}
        assert r["run_id"] == "run-a" and r["scored_at"].utcoffset().total_seconds() == 0
    return sink


def check_racing_same_chunk(make: MakeSink, location: str, threads: int = 4) -> None:
    make(location, "res", LAYOUT).ensure()
    sinks = [make(location, "res", LAYOUT) for _ in range(threads)]
    results: list[SinkCommit] = []
    start = threading.Barrier(threads)

    def commit(sink: Any) -> None:
        start.wait()
        results.append(sink.commit(chunk(0)))

    _run_all([threading.Thread(target=commit, args=(s,)) for s in sinks])
    assert sorted(r.status for r in results) == ["already"] * (threads - 1) + ["written"]
    assert len(sinks[0].read()) == ROWS_PER_CHUNK


def check_shards_concurrently(make: MakeSink, location: str, shards: int = 4, chunks: int = 3) -> None:
    sink = make(location, "res", LAYOUT)
    sink.ensure()
    start = threading.Barrier(shards)
    failures: list[BaseException] = []

    def shard(shard_id: int) -> None:
        start.wait()
        try:
            for number in range(chunks):
                assert sink.commit(chunk(number, shard_id=shard_id)).status == "written"
        except BaseException as exc:
            failures.append(exc)

    _run_all([threading.Thread(target=shard, args=(i,)) for i in range(shards)])
    assert not failures
    keys = [r["source_key"] for r in sink.read()]
    assert len(keys) == len(set(keys)) == shards * chunks * ROWS_PER_CHUNK


def check_killed_writer(make: MakeSink, kind: str, location: str, chunks: int = 12) -> Any:
    """A child committing chunks is SIGKILLed at random; committing them all again lands each once."""
    make(location, "res", LAYOUT).ensure()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, str(HERE / "lake_child.py"), kind, location, "res", str(chunks)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    time.sleep(random.uniform(0.0, 0.4))
    child.send_signal(signal.SIGKILL)
    child.wait()
    sink = make(location, "res", LAYOUT)
    for number in range(chunks):
        done = sink.commit(chunk(number))
        assert done.position == chunk(number).position
    keys = [r["source_key"] for r in sink.read()]
    assert keys == list(range(chunks * ROWS_PER_CHUNK))
    return sink


def check_committed_inputs(make: MakeSink, location: str) -> Any:
    sink = make(location, "res", LAYOUT)
    sink.ensure()
    sink.commit(chunk(0))
    sink.commit(chunk(0, run_id="run-v2", model_version="v2", fingerprint="fp-v2"))
    assert sorted(sink.committed_inputs("v1")) == sorted((str(k), "fp") for k in range(ROWS_PER_CHUNK))
    assert {fp for _, fp in sink.committed_inputs("v2")} == {"fp-v2"}
    assert list(sink.committed_inputs("v3")) == []
    assert len(sink.read("v2")) == ROWS_PER_CHUNK
    return sink


def check_sealed_shard(make: MakeSink, location: str) -> None:
    """A sealed shard takes no more chunks: a stale attempt's commit there writes nothing, says
    ``sealed``, and chunks below the seal stay ``already``; other shards are untouched."""
    sink = make(location, "res", LAYOUT)
    sink.ensure()
    sink.commit(chunk(0))
    sink.commit(chunk(1))
    assert sink.seal("run-a", 0, 2).status == "sealed"
    assert sink.seal("run-a", 0, 2).status == "sealed"  # idempotent
    assert sink.commit(chunk(2)).status == "sealed"
    assert sink.committed("run-a", 0, 2) == SinkCommit("sealed", {})
    assert sink.commit(chunk(1, salt="stale")) == SinkCommit("already", chunk(1).position, ROWS_PER_CHUNK)
    assert sink.commit(chunk(0, shard_id=1)).status == "written"
    keys = [r["source_key"] for r in sink.read()]
    assert keys == [*range(2 * ROWS_PER_CHUNK), *range(10_000, 10_000 + ROWS_PER_CHUNK)]
    # A chunk that landed where the seal was to go is answered with its record: the caller marks it.
    sink.commit(chunk(0, shard_id=2))
    assert sink.seal("run-a", 2, 0) == SinkCommit("already", chunk(0, shard_id=2).position, ROWS_PER_CHUNK)
    assert sink.seal("run-a", 2, 1).status == "sealed"


def check_stale_commit_meets_the_seal(make: MakeSink, location: str, held: str) -> Any:
    """A stale attempt's commit that read the table before the seal landed, and commits after it, is
    refused (``sealed``) and leaves no row: its method ``held`` (a read it makes before writing) is held
    until the seal is in."""
    sink = make(location, "res", LAYOUT)
    sink.ensure()
    sink.commit(chunk(0))
    stale = make(location, "res", LAYOUT)
    read, gate, reached = getattr(stale, held), threading.Event(), threading.Event()

    def held_read(*args: Any, **kwargs: Any) -> Any:
        found = read(*args, **kwargs)
        if not gate.is_set():
            reached.set()
            assert gate.wait(60)
        return found

    setattr(stale, held, held_read)
    answers: list[SinkCommit] = []
    writer = threading.Thread(target=lambda: answers.append(stale.commit(chunk(1, salt="stale"))))
    writer.start()
    assert reached.wait(60), "the stale commit never read the table"
    assert sink.seal("run-a", 0, 1).status == "sealed"  # the other attempt finished the shard
    gate.set()
    writer.join(60)
    assert answers == [SinkCommit("sealed", {})]
    assert [r["source_key"] for r in sink.read()] == list(range(ROWS_PER_CHUNK))
    return sink


def _run_all(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
        assert not thread.is_alive()
