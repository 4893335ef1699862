"""The extending page's JSON Lines sink, taken from the page as it stands.

The fast tests import the page's ``jsonl_sink.py`` and check the promise the
page makes for it (each chunk lands once, a sealed shard takes no more, a
kill between the seal and the shard's file is mended). The slow one copies
the page's titled files into a package outside the repository, installs it
beside the venv (``pip --target``, never into it, offline, with the build
backend its ``pyproject.toml`` names), and runs the page's bash block with
the package on ``PYTHONPATH``, where its entry point is found.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from shardwise.errors import ConfigError
from shardwise.model import OutputColumn
from shardwise.records import ResultRow
from shardwise.retry_policy import RetryPolicy
from shardwise.sinks.base import Layout, Lineage, Sink, SinkChunk, SinkCommit
from shardwise.sinks.registry import Destination, SinkKind

CHECKOUT = Path(__file__).resolve().parents[1]
PAGE = CHECKOUT / "docs" / "how-to" / "extending.md"
_TITLED = re.compile(r'^```(\w+) title="([^"]+)"\n(.*?)^```$', re.S | re.M)
_BASH = re.compile(r"^```bash\n(.*?)^```$", re.S | re.M)
_PIP = re.compile(r"^pip install (\./[\w.-]+)$")
LAYOUT = Layout((OutputColumn("embedding", "vector", dim=3), OutputColumn("label", "text")), "int")
DOCS = [(i, f"document number {i}, {'long ' * i}text") for i in range(1, 8)]


def _section() -> str:
    """The page's section of this example, up to the next section."""
    text = PAGE.read_text()
    start = text.index("## Example: a JSON Lines sink")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _titled() -> dict[str, str]:
    """The example's code blocks titled with a file name, by that name."""
    return {title: body for _, title, body in _TITLED.findall(_section())}


def _last_bash() -> str:
    blocks: list[str] = _BASH.findall(_section())
    return blocks[-1]


@pytest.fixture(scope="module")
def jsonl_sink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The page's ``jsonl_sink.py``, imported from a copy outside the repository."""
    path = tmp_path_factory.mktemp("module") / "jsonl_sink.py"
    path.write_text(_titled()["jsonl_sink.py"])
    spec = importlib.util.spec_from_file_location("jsonl_sink", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["jsonl_sink"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["jsonl_sink"]


def _sink(module: ModuleType, where: Path, layout: Layout = LAYOUT) -> Any:
    dest = Destination(str(where), str(where), "res")
    return module.KIND.open(dest, layout, module.JsonlOptions(), RetryPolicy())


def _chunk(number: int, keys: list[int], *, salt: str = "", shard: int = 0) -> SinkChunk:
    rows = [
        ResultRow(
            k, {"embedding": np.array([k, 0.5, 0.25], np.float32), "label": f"l{k}{salt}"}, f"fp{k}{salt}"
        )
        for k in keys
    ]
    lineage = Lineage("m", "v1", "code", None, "run-a", shard, datetime.now(timezone.utc))
    return SinkChunk("run-a", shard, number, rows, lineage, {"rows": keys[-1], "key": keys[-1]})


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_kind_and_its_sink_are_what_shardwise_takes(jsonl_sink: ModuleType, tmp_path: Path) -> None:
    assert isinstance(jsonl_sink.KIND, SinkKind) and jsonl_sink.KIND.name == "jsonl"
    sink = _sink(jsonl_sink, tmp_path)
    assert isinstance(sink, Sink) and sink.target == f"jsonl:{tmp_path}/res"
    assert sink.stored_key_type() is None
    sink.check()
    sink.ensure()
    sink.ensure()
    assert sink.stored_key_type() == "int"
    other = _sink(jsonl_sink, tmp_path, Layout(LAYOUT.outputs, "text"))
    for step in (other.check, other.ensure):
        with pytest.raises(ConfigError, match=r"another model or key type .*--results-table"):
            step()
    options = jsonl_sink.JsonlOptions()
    with pytest.raises(ConfigError, match="local directory"):
        jsonl_sink.KIND.check(Destination("s3://b/p", "s3://b/p", "res"), options)
    with pytest.raises(ConfigError, match="plain name"):
        jsonl_sink.KIND.check(Destination(str(tmp_path), str(tmp_path), "a/b"), options)


def test_a_chunk_lands_once_and_a_sealed_shard_takes_no_more(jsonl_sink: ModuleType, tmp_path: Path) -> None:
    sink = _sink(jsonl_sink, tmp_path)
    sink.ensure()
    assert sink.committed("run-a", 0, 0) is None
    assert sink.commit(_chunk(0, [1, 2])) == SinkCommit("written", {"rows": 2, "key": 2}, inserted=2)
    again = sink.commit(_chunk(0, [1, 2], salt="again"))
    assert again == SinkCommit("already", {"rows": 2, "key": 2}, inserted=2)
    assert sink.committed("run-a", 0, 0) == again
    sink.commit(_chunk(1, [3]))
    assert not (tmp_path / "res" / "run-a-s00000.jsonl").exists(), "no shard file before the seal"
    assert sink.seal("run-a", 0, 2) == SinkCommit("sealed", {})
    assert sink.seal("run-a", 0, 2) == SinkCommit("sealed", {})
    assert sink.commit(_chunk(2, [4], salt="stale")).status == "sealed"
    lines = _lines(tmp_path / "res" / "run-a-s00000.jsonl")
    assert [(r["source_key"], r["label"], r["input_fingerprint"]) for r in lines] == [
        (1, "l1", "fp1"),
        (2, "l2", "fp2"),
        (3, "l3", "fp3"),
    ]
    assert lines[0]["embedding"] == [1.0, 0.5, 0.25] and lines[0]["model_version"] == "v1"
    assert sorted(sink.committed_inputs("v1")) == [("1", "fp1"), ("2", "fp2"), ("3", "fp3")]
    assert list(sink.committed_inputs("v2")) == []
    assert [r["source_key"] for r in sink.read()] == [1, 2, 3]
    assert sink.read()[0]["embedding"].dtype == np.float32


def test_a_seal_meets_a_chunk_a_stale_attempt_committed_there(jsonl_sink: ModuleType, tmp_path: Path) -> None:
    sink = _sink(jsonl_sink, tmp_path)
    sink.ensure()
    sink.commit(_chunk(0, [1]))
    sink.commit(_chunk(1, [2], salt="stale"))
    landed = sink.seal("run-a", 0, 1)
    assert landed == SinkCommit("already", {"rows": 2, "key": 2}, inserted=1)
    assert sink.seal("run-a", 0, 2).status == "sealed"
    assert [r["label"] for r in _lines(tmp_path / "res" / "run-a-s00000.jsonl")] == ["l1", "l2stale"]


def test_racing_writers_of_one_chunk_land_it_once(jsonl_sink: ModuleType, tmp_path: Path) -> None:
    sink = _sink(jsonl_sink, tmp_path)
    sink.ensure()
    answers: list[SinkCommit] = []
    writers = [
        threading.Thread(target=lambda s=str(i): answers.append(sink.commit(_chunk(0, [1, 2], salt=s))))
        for i in range(8)
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert sorted(a.status for a in answers) == ["already"] * 7 + ["written"]
    sink.seal("run-a", 0, 1)
    labels = [r["label"] for r in _lines(tmp_path / "res" / "run-a-s00000.jsonl")]
    assert len(labels) == 2 and len({label[2:] for label in labels}) == 1, "the rows of one writer"


def test_a_kill_between_the_seal_and_the_shard_file_is_mended(
    jsonl_sink: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = _sink(jsonl_sink, tmp_path)
    sink.ensure()
    sink.commit(_chunk(0, [1, 2]))

    def killed(*args: object) -> None:
        raise KeyboardInterrupt  # the writer dies after its seal, before the shard's file is in place

    monkeypatch.setattr(jsonl_sink.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        sink.seal("run-a", 0, 1)
    monkeypatch.undo()
    shard_file = tmp_path / "res" / "run-a-s00000.jsonl"
    assert not shard_file.exists() and sink.committed("run-a", 0, 1) == SinkCommit("sealed", {})
    assert sink.tidy(lambda run: None) == []  # a run the ledger does not know is left alone
    assert sink.seal("run-a", 0, 1).status == "sealed"  # the resumed attempt seals again
    assert [r["source_key"] for r in _lines(shard_file)] == [1, 2]
    (tidied,) = sink.tidy(lambda run: run == "run-a")
    assert tidied.startswith("deleted _chunks/run-a/s00000/.shard.") and tidied.endswith("killed writer")
    assert list((tmp_path / "res").rglob("*.tmp")) == []


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The page's package, built offline and installed under a folder of its own outside the repository;
    the folder the page's commands run in, and their environment."""
    root = tmp_path_factory.mktemp("extending")
    pip_line, *_ = _last_bash().splitlines()
    match = _PIP.match(pip_line)
    assert match, f"the page's bash block starts by installing the package: {pip_line!r}"
    package = root / match.group(1)
    package.mkdir()
    files = _titled()
    assert set(files) == {"pyproject.toml", "jsonl_sink.py"}, set(files)
    for name, body in files.items():
        (package / name).write_text(body)
    site = root / "site"
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index"]
    proc = subprocess.run(
        [*command, "--target", str(site), match.group(1)], cwd=root, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(site.glob("*.dist-info/entry_points.txt")), "the entry point travels in the dist-info"
    source = root / "docs.db"
    with sqlite3.connect(source) as db:
        db.execute("create table docs (id integer primary key, text text not null)")
        db.executemany("insert into docs values (?, ?)", DOCS)
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "SOURCE_URL": f"sqlite:///{source}",
        "OUT": str(root / "out"),
    }
    return root, env


@pytest.mark.slow
def test_the_page_example_runs_out_of_the_repository(installed: tuple[Path, dict[str, str]]) -> None:
    root, env = installed
    _, *commands = _last_bash().splitlines()  # the pip line is done: beside the venv, not in it
    script = "\n".join(commands)
    assert "shardwise run " in script and "--results-format jsonl" in script

    def run() -> list[dict[str, Any]]:
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return [line for path in sorted((root / "out").rglob("*.jsonl")) for line in _lines(path)]

    first = run()
    assert len(list((root / "out" / "shardwise_results").glob("*.jsonl"))) == 2, "a file per shard"
    assert sorted(r["source_key"] for r in first) == [i for i, _ in DOCS], "one object per source row"
    for row in first:
        assert len(row["embedding"]) == 32 and all(isinstance(v, float) for v in row["embedding"])
        assert all(round(v, 6) == v for v in row["embedding"]), "--jsonl-decimals 6 reached the sink"
    assert run() == first, "the same command again (--only-new) adds nothing"

    proc = subprocess.run(
        ["shardwise", "run", "--help"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    (choices,) = re.findall(r"--results-format \{([\w,]+)\}", proc.stdout)[:1]
    assert "jsonl" in choices.split(","), choices
    assert "--jsonl-decimals" in proc.stdout
