"""The extending page's examples, taken from the page as they stand: its JSON Lines sink.

Each example says which folder its files go in ("in a folder `NAME`") and
ends with its own bash block, run from the folder above it. The fast tests
register the page's ``jsonl_sink.py`` (a dist-info on ``sys.path``, as pip
leaves one), put it through the sink contract (:mod:`shardwise.testing`)
and check the promise the page makes for its files (each chunk lands once,
a sealed shard takes no more, a kill between the seal and the shard's file
is mended). The slow ones copy the example's titled files into a package
outside the repository, install it beside the venv (``pip --target``, never
into it, offline, with the build backend its ``pyproject.toml`` names), and
run its bash block with the package on ``PYTHONPATH``, where its entry point
is found: the contract passes there, and fails, naming the guarantee, for a
copy whose commit writes a chunk twice.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from page_examples import examples as page_examples
from page_examples import install, last_bash, titled

from shardwise.errors import ConfigError
from shardwise.model import OutputColumn
from shardwise.records import ResultRow
from shardwise.retry_policy import RetryPolicy
from shardwise.sinks.base import Layout, Lineage, Sink, SinkChunk, SinkCommit
from shardwise.sinks.registry import Destination, SinkKind, clear_cache
from shardwise.testing import SINK_CHECKS, SinkPlace

LAYOUT = Layout((OutputColumn("embedding", "vector", dim=3), OutputColumn("label", "text")), "int")
DOCS = [(i, f"document number {i}, {'long ' * i}text") for i in range(1, 8)]


def _titled(folder: str = "jsonl-sink") -> dict[str, str]:
    return titled(folder)


def _last_bash(folder: str = "jsonl-sink") -> str:
    return last_bash(folder)


def _register(site: Path, module: str, body: str) -> None:
    """``module`` written into ``site`` with a dist-info registering its ``KIND`` as the ``jsonl`` sink."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(body)
    info = site / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[shardwise.sinks]\njsonl = {module}:KIND\n")


def test_each_example_names_its_folder_and_ends_with_a_bash_block_run_from_above_it() -> None:
    examples = page_examples()
    assert "jsonl-sink" in examples, list(examples)
    for folder in examples:
        assert _titled(folder), f"the example in a folder {folder!r} has titled files"
        first, *_ = _last_bash(folder).splitlines()
        assert first == f"pip install ./{folder}", f"its last bash block installs ./{folder}: {first!r}"


@pytest.fixture(scope="module")
def jsonl_sink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The page's ``jsonl_sink.py``, registered as the ``jsonl`` sink kind from a folder outside the
    repository, and imported."""
    site = tmp_path_factory.mktemp("module")
    _register(site, "jsonl_sink", _titled()["jsonl_sink.py"])
    sys.path.insert(0, str(site))
    clear_cache()
    try:
        yield importlib.import_module("jsonl_sink")
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("jsonl_sink", None)
        clear_cache()


@pytest.mark.parametrize(
    "check",
    [
        pytest.param(check, id=name, marks=[pytest.mark.slow] if name == "kill mid-commit" else [])
        for name, check in SINK_CHECKS.items()
    ],
)
def test_the_example_passes_the_sink_contract(
    jsonl_sink: ModuleType, tmp_path: Path, check: Callable[[SinkPlace], Sink]
) -> None:
    check(SinkPlace("jsonl", str(tmp_path / "out")))


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
    return root, install(root, "jsonl-sink", {"pyproject.toml", "jsonl_sink.py"}, DOCS)


@pytest.mark.slow
def test_the_page_example_runs_out_of_the_repository(installed: tuple[Path, dict[str, str]]) -> None:
    root, env = installed
    _, *commands = _last_bash().splitlines()  # the pip line is done: beside the venv, not in it
    script = "\n".join(commands)
    assert "shardwise run " in script and "--results-format jsonl" in script
    assert "python -m shardwise.testing sink jsonl" in script, "the example is put through its contract"

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


_LANDED_ONCE = """\
        if found is not None:
            return found  # a retry, a resumed attempt, or a racing worker: written once already
"""
_CREATED_ONCE = """\
        if _create(self._record(chunk.run_id, chunk.shard_id, chunk.number), record):
"""
_WRITTEN_AGAIN = """\
        path = self._record(chunk.run_id, chunk.shard_id, chunk.number)
        path.unlink(missing_ok=True)  # the chunk is written again, over what the first commit wrote
        if _create(path, record):
"""


@pytest.mark.slow
def test_the_contract_passes_the_installed_example_and_fails_a_copy_that_writes_a_chunk_twice(
    installed: tuple[Path, dict[str, str]],
) -> None:
    root, env = installed
    contract = [sys.executable, "-m", "shardwise.testing", "sink", "jsonl"]
    passed = subprocess.run(contract, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert passed.stdout.splitlines()[-1] == "sink jsonl: the contract holds", passed.stdout

    body = (root / "site" / "jsonl_sink.py").read_text()
    assert _LANDED_ONCE in body and _CREATED_ONCE in body, "the page's commit is the one this copy breaks"
    twice = body.replace(_LANDED_ONCE, "").replace(_CREATED_ONCE, _WRITTEN_AGAIN)
    broken = root / "broken-site"
    _register(broken, "jsonl_sink", twice)
    failed = subprocess.run(
        contract,
        cwd=root,
        env={**env, "PYTHONPATH": str(broken)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert failed.returncode == 1, failed.stdout + failed.stderr
    (line,) = failed.stderr.splitlines()
    assert line.startswith("sink jsonl: idempotent commit broken: committing chunk 3 twice wrote it twice"), (
        line
    )


def test_the_contract_command_names_the_installed_kinds_for_an_unknown_one() -> None:
    command = [sys.executable, "-m", "shardwise.testing", "sink", "nope"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "sink kind 'nope' is not installed; installed: delta, iceberg, parquet, sql"
    usage = subprocess.run([*command[:3], "sinks"], capture_output=True, text=True, timeout=120)
    assert usage.returncode == 2 and "sink|source|model KIND" in usage.stderr
