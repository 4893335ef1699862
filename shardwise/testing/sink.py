"""The sink contract: what every sink kind must do (:mod:`shardwise.sinks.base`), as checks on any kind.

Each check takes a :class:`SinkPlace` (a kind's name, a location of its:
a folder, or a database URL, and its options), opens sinks there through
the registry as a run does, and raises :class:`ContractBroken` naming the
guarantee it found broken. The checks, in :data:`SINK_CHECKS`:

- ``layout``: ``check()`` creates nothing; ``ensure()`` is idempotent; a target of another layout is
  refused naming ``--results-table``;
- ``idempotent commit``: a chunk committed again writes nothing and is answered ``already`` with the
  record stored the first time; its rows read back once, as committed;
- ``committed``: ``committed()`` answers truthfully: ``None`` before, the record after, ``sealed`` at a seal;
- ``seal``: a sealed shard takes no more chunks; a chunk that landed where the seal goes is answered;
- ``concurrent writers``: writers racing on one chunk land it once; shards committed at once all land;
- ``committed inputs``: what ``--only-new`` reads is each stored key's fingerprint, per model version;
- ``kill between commit and mark``: a process killed after its commit returned, before the ledger
  marked the chunk, leaves it committed; the resumed attempt's commit is ``already``;
- ``kill mid-commit``: a writer killed at a random moment leaves every chunk landed once after a
  resumed attempt commits them all again.

A run seals a shard before it marks it done, so the checks seal a shard before reading its rows back (a
file sink may make a shard's rows visible only then). Run them from a plug-in's tests::

    import pytest
    from shardwise.testing import SINK_CHECKS, SinkPlace

    @pytest.mark.parametrize("check", SINK_CHECKS.values(), ids=SINK_CHECKS.keys())
    def test_sink_contract(check, tmp_path):
        check(SinkPlace("jsonl", str(tmp_path)))

or from a shell, on an installed kind: ``python -m shardwise.testing sink jsonl``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shardwise.errors import ConfigError
from shardwise.retry_policy import RetryPolicy
from shardwise.sinks.base import Layout, Sink, SinkCommit
from shardwise.sinks.registry import Destination, sink_kind
from shardwise.testing.broken import ContractBroken, expect
from shardwise.testing.rows import LAYOUT, OTHER_LAYOUT, ROWS_PER_CHUNK, chunk, vector

__all__ = ["SINK_CHECKS", "SinkPlace", "scratch_place", "stale_commit_meets_the_seal"]

_TABLE = "res"


@dataclass(frozen=True)
class SinkPlace:
    """Where a check writes: a kind by name, a location it takes (a folder, ``s3://...``, a database URL)
    and its own options by field name. Plain data, so a child process opens the same sinks."""

    kind: str
    location: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def open(self, table: str = _TABLE, layout: Layout = LAYOUT) -> Sink:
        """A new sink of the kind at this place, opened as a run opens it."""
        kind = sink_kind(self.kind)
        own = kind.options.model_validate(dict(self.options))
        return kind.open(Destination(self.location, self.location, table), layout, own, RetryPolicy())

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "options": dict(self.options)})

    @classmethod
    def from_json(cls, text: str) -> SinkPlace:
        return cls(**json.loads(text))


def check_layout(place: SinkPlace) -> Sink:
    what = "layout"
    place.open().check()  # nothing there yet: nothing to refuse
    sink = place.open()
    expect(sink.stored_key_type() is None, what, "check() created the target, or a new one has a key type")
    sink.ensure()
    sink.ensure()
    sink.check()
    stored = sink.stored_key_type()
    expect(stored == "int", what, f"after ensure() the stored key type is {stored!r}, not 'int'")
    other = place.open(layout=OTHER_LAYOUT)
    for step in (other.check, other.ensure):
        try:
            step()
        except ConfigError as exc:
            expect(
                "--results-table" in str(exc),
                what,
                f"{step.__name__}() refused without naming --results-table: {exc}",
            )
        else:
            raise ContractBroken(what, f"{step.__name__}() took a target of another layout")
    return sink


def check_idempotent_commit(place: SinkPlace, chunks: int = 4) -> Sink:
    what = "idempotent commit"
    sink = _ensured(place)
    for number in range(chunks):
        done = sink.commit(chunk(number))
        expected = SinkCommit("written", chunk(number).position, inserted=ROWS_PER_CHUNK)
        expect(done == expected, what, f"committing chunk {number} answered {done}, not {expected}")
    last = chunks - 1
    again = sink.commit(chunk(last, salt="again"))
    first = SinkCommit("already", chunk(last).position, inserted=ROWS_PER_CHUNK)
    twice = f"committing chunk {last} twice"
    expect(again.status != "written", what, f"{twice} wrote it twice (the second commit answered 'written')")
    expect(again == first, what, f"{twice} answered {again} the second time, not the first's record {first}")
    _seal(sink, 0, chunks)
    rows = sink.read()
    keys = [r["source_key"] for r in rows]
    copies = keys.count(last * ROWS_PER_CHUNK)
    expect(copies == 1, what, f"committing chunk {last} twice left {copies} copies of its rows")
    expect(keys == list(range(chunks * ROWS_PER_CHUNK)), what, f"the rows read back have keys {_short(keys)}")
    _same_values(rows, what)
    return sink


def check_committed(place: SinkPlace) -> Sink:
    what = "committed() answers truthfully"
    sink = _ensured(place)
    expect(sink.committed("run-a", 0, 0) is None, what, "committed() found chunk 0 before any commit")
    written = sink.commit(chunk(0))
    record = SinkCommit("already", written.position, written.inserted, written.updated, written.unchanged)
    found = sink.committed("run-a", 0, 0)
    expect(found == record, what, f"after committing chunk 0 it answered {found}, not {record}")
    for where in (("run-a", 0, 1), ("run-a", 1, 0), ("run-b", 0, 0)):
        found = sink.committed(*where)
        expect(found is None, what, f"it answered {found} for (run, shard, chunk) {where}, never committed")
    found = place.open().committed("run-a", 0, 0)
    expect(found == record, what, f"a sink opened afresh answered {found} for chunk 0, not {record}")
    _seal(sink, 0, 1)
    found = sink.committed("run-a", 0, 1)
    expect(found == SinkCommit("sealed", {}), what, f"at the seal it answered {found}, not sealed")
    return sink


def check_seal(place: SinkPlace) -> Sink:
    what = "seal"
    sink = _ensured(place)
    sink.commit(chunk(0))
    sink.commit(chunk(1))
    for attempt in ("sealing", "sealing again"):
        done = sink.seal("run-a", 0, 2)
        expect(done.status == "sealed", what, f"{attempt} shard 0 at chunk 2 answered {done}")
    late = sink.commit(chunk(2))
    expect(late.status == "sealed", what, f"a commit at the seal answered {late}, not sealed")
    stale = sink.commit(chunk(1, salt="stale"))
    landed = SinkCommit("already", chunk(1).position, ROWS_PER_CHUNK)
    expect(stale == landed, what, f"a stale commit below the seal answered {stale}, not {landed}")
    expect(sink.commit(chunk(0, shard_id=1)).status == "written", what, "the seal of shard 0 closed shard 1")
    _seal(sink, 1, 1)
    sink.commit(chunk(0, shard_id=2))  # a chunk that landed where the seal was to go: the caller marks it
    found = sink.seal("run-a", 2, 0)
    landed = SinkCommit("already", chunk(0, shard_id=2).position, ROWS_PER_CHUNK)
    expect(found == landed, what, f"sealing where a chunk landed answered {found}, not its record {landed}")
    _seal(sink, 2, 1)
    keys = [r["source_key"] for r in sink.read()]
    wanted = [*range(2 * ROWS_PER_CHUNK), *range(10_000, 10_000 + ROWS_PER_CHUNK)]
    wanted += list(range(20_000, 20_000 + ROWS_PER_CHUNK))
    expect(keys == wanted, what, f"the sealed shards hold keys {_short(keys)}, not {_short(wanted)}")
    return sink


def check_concurrent_writers(place: SinkPlace, threads: int = 4, chunks: int = 3) -> Sink:
    what = "concurrent writers"
    sink = _ensured(place)
    racers = [place.open() for _ in range(threads)]
    answers: list[SinkCommit] = []
    start = threading.Barrier(threads)

    def race(racer: Sink) -> None:
        start.wait()
        answers.append(racer.commit(chunk(0, shard_id=99)))

    _run_all([threading.Thread(target=race, args=(r,)) for r in racers])
    statuses = sorted(a.status for a in answers)
    expect(
        statuses == ["already"] * (threads - 1) + ["written"],
        what,
        f"{threads} writers racing on one chunk were answered {statuses}",
    )
    failures: list[BaseException] = []

    def shard(shard_id: int) -> None:
        start.wait()
        try:
            for number in range(chunks):
                done = sink.commit(chunk(number, shard_id=shard_id))
                expect(done.status == "written", what, f"shard {shard_id} chunk {number} answered {done}")
            _seal(sink, shard_id, chunks)
        except BaseException as exc:
            failures.append(exc)

    _run_all([threading.Thread(target=shard, args=(i,)) for i in range(threads)])
    if failures:
        raise failures[0]
    _seal(sink, 99, 1)
    keys = [r["source_key"] for r in sink.read()]
    wanted = threads * chunks * ROWS_PER_CHUNK + ROWS_PER_CHUNK
    expect(
        len(keys) == len(set(keys)) == wanted,
        what,
        f"{threads} shards committed at once, and a raced "
        f"chunk, left {len(keys)} rows of {len(set(keys))} keys, not {wanted}",
    )
    return sink


def check_committed_inputs(place: SinkPlace) -> Sink:
    what = "committed inputs (--only-new)"
    sink = _ensured(place)
    sink.commit(chunk(0))
    _seal(sink, 0, 1)
    sink.commit(chunk(0, run_id="run-v2", model_version="v2", fingerprint="fp-v2"))
    _seal(sink, 0, 1, run_id="run-v2")
    found = sorted(sink.committed_inputs("v1"))
    wanted = sorted((str(k), "fp") for k in range(ROWS_PER_CHUNK))
    expect(found == wanted, what, f"version v1's inputs are {_short(found)}, not {_short(wanted)}")
    v2 = {fp for _, fp in sink.committed_inputs("v2")}
    expect(v2 == {"fp-v2"}, what, f"version v2's fingerprints are {v2}, not {{'fp-v2'}}")
    v3 = list(sink.committed_inputs("v3"))
    expect(v3 == [], what, f"a version never stored has inputs {_short(v3)}")
    expect(len(sink.read("v2")) == ROWS_PER_CHUNK, what, "read('v2') is not the v2 rows")
    return sink


def check_kill_between_commit_and_mark(place: SinkPlace, chunks: int = 4, killed_at: int = 2) -> Sink:
    """A writer killed as its commit of chunk ``killed_at`` returned (before the ledger could mark it)."""
    what = "kill between commit and mark"
    sink = _ensured(place)
    child = _child(place, chunks, killed_at)
    out, _ = child.communicate(timeout=300)
    expect(child.returncode == -signal.SIGKILL, what, f"the writer was not killed: {out.strip()}")
    stored = SinkCommit("already", chunk(killed_at).position, inserted=ROWS_PER_CHUNK)
    found = sink.committed("run-a", 0, killed_at)
    expect(found == stored, what, f"chunk {killed_at}, committed before the kill, is answered {found}")
    resumed = sink.commit(chunk(killed_at, salt="resumed"))
    expect(
        resumed == stored,
        what,
        f"the resumed attempt's commit of chunk {killed_at} answered {resumed}, not {stored}",
    )
    for number in range(killed_at + 1, chunks):
        sink.commit(chunk(number))
    _seal(sink, 0, chunks)
    keys = [r["source_key"] for r in sink.read()]
    wanted = list(range(chunks * ROWS_PER_CHUNK))
    expect(keys == wanted, what, f"after the resumed attempt the rows have keys {_short(keys)}")
    return sink


def check_kill_mid_commit(place: SinkPlace, chunks: int = 12) -> Sink:
    """A writer killed at a random moment of committing chunks; committing them all again lands each once."""
    what = "kill mid-commit"
    sink = _ensured(place)
    child = _child(place, chunks, None)
    assert child.stdout is not None
    ready = child.stdout.readline().strip()
    expect(ready == "ready", what, f"the writer did not start: {ready!r}{child.stdout.read()}")
    time.sleep(random.uniform(0.0, 0.4))
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=300)
    sink = place.open()
    for number in range(chunks):
        done = sink.commit(chunk(number))
        expect(done.position == chunk(number).position, what, f"chunk {number} answered {done}")
    _seal(sink, 0, chunks)
    keys = [r["source_key"] for r in sink.read()]
    expect(keys == list(range(chunks * ROWS_PER_CHUNK)), what, f"the rows have keys {_short(keys)}")
    return sink


def stale_commit_meets_the_seal(place: SinkPlace, held: str) -> Sink:
    """A stale attempt's commit that read the target before the seal landed, and writes after it, is
    refused (``sealed``) and leaves no row. ``held`` names the sink's own method (a read it makes before
    writing) that is held until the seal is in: a check for a kind that names such a read."""
    what = "seal"
    sink = _ensured(place)
    sink.commit(chunk(0))
    stale = place.open()
    read, gate, reached = getattr(stale, held), threading.Event(), threading.Event()

    def held_read(*args: Any, **kwargs: Any) -> Any:
        found = read(*args, **kwargs)
        if not gate.is_set():
            reached.set()
            gate.wait(60)
        return found

    setattr(stale, held, held_read)
    answers: list[SinkCommit] = []
    writer = threading.Thread(target=lambda: answers.append(stale.commit(chunk(1, salt="stale"))))
    writer.start()
    expect(reached.wait(60), what, f"the stale commit never called {held}()")
    expect(sink.seal("run-a", 0, 1).status == "sealed", what, "the seal did not land")
    gate.set()
    writer.join(60)
    expect(answers == [SinkCommit("sealed", {})], what, f"a stale commit met by the seal answered {answers}")
    keys = [r["source_key"] for r in sink.read()]
    expect(keys == list(range(ROWS_PER_CHUNK)), what, f"the stale commit left rows: {_short(keys)}")
    return sink


SINK_CHECKS: dict[str, Callable[[SinkPlace], Sink]] = {
    "layout": check_layout,
    "idempotent commit": check_idempotent_commit,
    "committed": check_committed,
    "seal": check_seal,
    "concurrent writers": check_concurrent_writers,
    "committed inputs": check_committed_inputs,
    "kill between commit and mark": check_kill_between_commit_and_mark,
    "kill mid-commit": check_kill_mid_commit,
}
"""Every check of the sink contract, by the guarantee it checks."""


def _ensured(place: SinkPlace) -> Sink:
    sink = place.open()
    sink.ensure()
    return sink


def _seal(sink: Sink, shard_id: int, number: int, run_id: str = "run-a") -> None:
    done = sink.seal(run_id, shard_id, number)
    expect(
        done.status == "sealed",
        "seal",
        f"sealing shard {shard_id} of {run_id} at chunk {number} answered {done}",
    )


def _same_values(rows: list[dict[str, Any]], what: str) -> None:
    for r in rows:
        key = r["source_key"]
        embedding = np.asarray(r["embedding"])
        expect(
            embedding.dtype == np.float32 and np.array_equal(embedding, vector(key)),
            what,
            f"key {key}'s vector read back is {embedding!r}, not the float32 vector committed",
        )
        others = {
            "score": key / 3,
            "tokens": key,
            "label": f"k{key}",
            "extra": {"key": key, "salt": "", "ü": [1, 2]},
        }
        for name, value in others.items():
            expect(r[name] == value, what, f"key {key}'s {name} read back is {r[name]!r}, not {value!r}")


def _child(place: SinkPlace, chunks: int, kill_after: int | None) -> subprocess.Popen[str]:
    """A writer process committing chunks 0.. of shard 0 (see :mod:`shardwise.testing.sink_child`)."""
    paths = [p for p in sys.path if p]  # a plug-in found here is found there
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    argv = [sys.executable, "-m", "shardwise.testing.sink_child", place.to_json(), str(chunks)]
    if kill_after is not None:
        argv.append(str(kill_after))
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)


def _run_all(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
        expect(not thread.is_alive(), "concurrent writers", "a writer did not finish in 120 s")


def _short(values: list[Any]) -> str:
    return (
        repr(values)
        if len(values) <= 6
        else f"[{values[0]!r}, {values[1]!r}, ... {values[-1]!r}] ({len(values)})"
    )


def scratch_place(kind: str, folder: Path) -> SinkPlace:
    """A place for ``kind`` in the empty ``folder``: an SQLite file for a database kind that takes one, a
    folder for a location kind; a database kind without SQLite is refused (give it a SinkPlace)."""
    found = sink_kind(kind)
    found.require()  # a missing package is no broken guarantee: it is refused before any check
    schemes = found.schemes
    if not schemes:
        return SinkPlace(kind, str(folder / "results"))
    if "sqlite" in schemes:
        return SinkPlace(kind, f"sqlite:///{folder / 'results.db'}")
    raise ConfigError(
        f"sink kind {kind!r} writes to a database ({', '.join(schemes)}), and the contract runs on "
        "temporary files only; run its checks from your tests with a SinkPlace of a test database"
    )
