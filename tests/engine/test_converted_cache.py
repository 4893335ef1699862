"""The converted-model cache: converted once per key, whole or not at all, rebuilt when corrupt, bounded,
cleared, and filled once when two processes ask for one entry at the same moment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from full_disk import full_disk

from shardwise import ConfigError
from shardwise.model.converted import ConvertedCache

KEY = {"file": "a" * 64, "torch": "1", "transformers": "2"}


def _writer(size: int, calls: list[Path]):
    def convert(into: Path) -> None:
        calls.append(into)
        (into / "weights.bin").write_bytes(b"w" * size)
        (into / "config.json").write_text("{}")

    return convert


def test_an_entry_is_converted_once_and_read_afterwards(tmp_path: Path) -> None:
    cache, calls = ConvertedCache(tmp_path / "kept"), []
    first = cache.entry("gguf", KEY, _writer(100, calls))
    again = cache.entry("gguf", KEY, _writer(100, calls))
    assert first == again and len(calls) == 1
    assert (first / "weights.bin").read_bytes() == b"w" * 100
    other = cache.entry("gguf", {**KEY, "torch": "9"}, _writer(100, calls))  # an upgrade: another entry
    assert other != first and len(calls) == 2
    assert [e.path for e in cache.entries()] == [first, other]
    assert not [p for p in cache.root.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.parametrize("damage", ["truncated", "missing", "manifest", "no manifest"])
def test_a_corrupt_entry_is_converted_again(tmp_path: Path, damage: str) -> None:
    cache, calls = ConvertedCache(tmp_path / "kept"), []
    path = cache.entry("gguf", KEY, _writer(100, calls))
    if damage == "truncated":
        (path / "weights.bin").write_bytes(b"w" * 10)
    elif damage == "missing":
        (path / "weights.bin").unlink()
    elif damage == "manifest":
        (path / "entry.json").write_text("{not json")
    else:
        (path / "entry.json").unlink()
    assert cache.entries() == []
    again = cache.entry("gguf", KEY, _writer(100, calls))
    assert again == path and len(calls) == 2
    assert (path / "weights.bin").stat().st_size == 100 and len(cache.entries()) == 1


def test_a_failed_conversion_leaves_nothing(tmp_path: Path) -> None:
    cache = ConvertedCache(tmp_path / "kept")

    def broken(into: Path) -> None:
        (into / "weights.bin").write_bytes(b"half")
        raise RuntimeError("not a GGUF file")

    with pytest.raises(RuntimeError, match="not a GGUF"):
        cache.entry("gguf", KEY, broken)
    assert cache.entries() == [] and not [p for p in cache.root.iterdir() if p.is_dir()]


def test_the_least_recently_used_entries_go_beyond_the_bound(tmp_path: Path) -> None:
    cache, calls = ConvertedCache(tmp_path / "kept", max_bytes=2500), []
    keys = [{**KEY, "file": str(i)} for i in range(4)]
    paths = []
    for key in keys[:2]:
        paths.append(cache.entry("gguf", key, _writer(1000, calls)))
        time.sleep(0.05)  # distinct use times
    cache.entry("gguf", keys[0], _writer(1000, calls))  # used again: now the newest
    time.sleep(0.05)
    paths.append(cache.entry("gguf", keys[2], _writer(1000, calls)))
    left = [e.path for e in cache.entries()]
    assert left == [paths[0], paths[2]] and not paths[1].exists()  # the least recently used went
    assert sum(e.bytes for e in cache.entries()) <= 2500
    big = cache.entry("gguf", keys[3], _writer(5000, calls))  # larger than the bound: kept, alone
    assert [e.path for e in cache.entries()] == [big]


def test_clear_removes_everything(tmp_path: Path) -> None:
    cache, calls = ConvertedCache(tmp_path / "kept"), []
    for i in range(2):
        cache.entry("gguf", {**KEY, "file": str(i)}, _writer(1000, calls))
    (cache.root / ".tmp-left-by-a-dead-process").mkdir()
    assert cache.clear() >= 2000
    assert cache.entries() == [] and not [p for p in cache.root.iterdir() if p.is_dir()]


def test_a_bound_below_one_byte_is_refused() -> None:
    with pytest.raises(ConfigError, match="at least 1 byte, got 0"):
        ConvertedCache(Path("kept"), max_bytes=0)


RACER = """
import json, os, sys, time
from pathlib import Path
from shardwise.model.converted import ConvertedCache

root, log, start = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])

def convert(into):
    with open(log, "a") as out:
        out.write(f"{os.getpid()}\\n")
    for i in range(20):  # slow and in pieces, so a reader of a half-written entry would see it
        (into / f"part-{i}.bin").write_bytes(bytes([i]) * 50_000)
        time.sleep(0.02)

while time.time() < start:
    time.sleep(0.001)
path = ConvertedCache(root).entry("gguf", {"file": "f"}, convert)
sizes = sorted((p.name, p.stat().st_size) for p in path.iterdir() if p.name.startswith("part-"))
print(json.dumps({"path": str(path), "parts": len(sizes), "whole": all(s == 50_000 for _, s in sizes)}))
"""


def test_two_processes_asking_at_once_convert_once_and_both_read_a_whole_entry(tmp_path: Path) -> None:
    root, log = tmp_path / "kept", tmp_path / "converted-by.txt"
    start = str(time.time() + 3)  # both are past their imports by then
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(root), str(log), start],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [json.loads(racer.communicate(timeout=120)[0]) for racer in racers]
    assert all(racer.returncode == 0 for racer in racers)
    assert outs[0] == outs[1] and outs[0]["parts"] == 20 and outs[0]["whole"]
    assert len(log.read_text().split()) == 1  # the second waited and read the first's entry
    assert [e.path for e in ConvertedCache(root).entries()] == [Path(outs[0]["path"])]
    manifest = json.loads((Path(outs[0]["path"]) / "entry.json").read_text())
    assert manifest["key"] == {"file": "f"}


LATER = """
import sys
from pathlib import Path
from shardwise.model.converted import ConvertedCache

def convert(into):
    (into / "weights.bin").write_bytes(b"w" * 100)

path = ConvertedCache(Path(sys.argv[1])).entry("gguf", {"file": "f"}, convert)
print((path / "weights.bin").read_bytes().decode())
"""


def _later_process(root: Path) -> str:
    """What another process reads from the entry (converting it again when it finds it corrupt)."""
    done = subprocess.run(
        [sys.executable, "-c", LATER, str(root)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_same_size_corruption_is_found_by_its_digest_at_first_use_in_a_process(tmp_path: Path) -> None:
    """Issue 45: sizes alone let a flipped byte through, changing generated texts under one version."""
    cache, calls = ConvertedCache(tmp_path / "kept"), []
    key = {"file": "f"}
    path = cache.entry("gguf", key, _writer(100, calls))
    (path / "weights.bin").write_bytes(b"x" * 100)  # the same size, other bytes
    assert cache.entry("gguf", key, _writer(100, calls)) == path and len(calls) == 1, "hashed once a process"
    assert _later_process(cache.root) == "w" * 100  # a later process hashes it, and converts again
    assert [e.path for e in cache.entries()] == [path] and (path / "weights.bin").read_bytes() == b"w" * 100
    manifest = json.loads((path / "entry.json").read_text())
    assert set(manifest["digests"]) == {"weights.bin"}


def test_a_cache_that_cannot_be_written_says_so_once_and_keeps_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache, calls = ConvertedCache(tmp_path / "kept"), []
    with full_disk(1000):  # a disk that fills up while the entry is written
        found = [cache.entry("gguf", {**KEY, "file": str(i)}, _writer(5000, calls)) for i in range(2)]
    assert found == [None, None] and len(calls) == 2
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and f"cannot keep converted models in {cache.root}" in warned[0], warned
    assert "free disk space there" in warned[0]
    assert cache.entries() == [] and not [p for p in cache.root.iterdir() if p.is_dir()]
