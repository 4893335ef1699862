"""A GGUF causal LM end to end: ``shardwise run --model FILE.gguf --prompt ...`` on SQLite.

The file is the tiny random Llama of ``tests/hf_builders.py`` written as GGUF
in the test (``tests/gguf_builders.py``). The results table gets the same
four columns as for a model directory, equal to the engine's own generation,
with the file's path as the model name; without the ``gguf`` extra the run is
refused with one line naming it, before anything runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from flow_data import BAD_ROWS, execute, make_docs
from gguf_builders import write_gguf
from hf_builders import tiny_causal_lm

from shardwise import Engine, EngineConfig
from shardwise.flows.cli import main
from shardwise.hashing import hash_file
from shardwise.model.converted import ConvertedCache
from shardwise.model.generation import GenerationSettings
from shardwise.models.gguf.spec import GGUFCausalSpec

pytestmark = [pytest.mark.usefixtures("prefect_harness")]
pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")

ROWS = 12
PROMPT = "Summarise: {text}"
COLUMNS = "source_key, generated_text, finish_reason, prompt_tokens, completion_tokens"


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lm = tiny_causal_lm(tmp_path_factory.mktemp("lm"), context=4096)
    return write_gguf(lm, tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def _cli(url: str, model: Path) -> list[str]:
    return [
        "run", "--source", url, "--table", "docs", "--model", str(model), "--results-table", "generated",
        "--prompt", PROMPT, "--max-new-tokens", "6", "--chat", "off", "--precision", "fp32", "--shards", "2",
    ]  # fmt: skip


def _expected(spec: GGUFCausalSpec, rows: list[tuple[int, Any]]) -> dict[int, tuple[Any, ...]]:
    results = Engine(spec.load(torch.device("cpu")), EngineConfig(precision="fp32")).run(rows)
    names = COLUMNS.split(", ")[1:]
    return {int(r.key): tuple(r.values[n] for n in names) for r in results if r.values is not None}


def test_sqlite_cli_run_with_a_gguf_model_writes_generated_text(
    sqlite_url: str, gguf_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = make_docs(sqlite_url, ROWS)
    code = main(_cli(sqlite_url, gguf_file))
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"completed: {ROWS} rows scored" in out and f"{len(BAD_ROWS)} dead letters" in out
    stored = execute(sqlite_url, f"select {COLUMNS} from generated order by source_key")
    spec = GGUFCausalSpec(
        gguf_file, generation=GenerationSettings(prompt=PROMPT, chat="off", max_new_tokens=6)
    )
    assert {int(k): tuple(rest) for k, *rest in stored} == _expected(spec, rows[:ROWS])
    assert any(text for _, text, *_ in stored)
    lineage = execute(sqlite_url, "select distinct model_name, model_version from generated")
    assert lineage == [(f"hf:{gguf_file.resolve()}", spec.describe().version)]


def test_without_the_extra_the_run_is_refused_before_anything_runs(
    sqlite_url: str, gguf_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_docs(sqlite_url, 3)
    monkeypatch.setitem(sys.modules, "gguf", None)  # import gguf raises ImportError
    code = main(_cli(sqlite_url, gguf_file))
    err = capsys.readouterr().err
    assert code == 2, err
    (line,) = [line for line in err.splitlines() if "pip install 'shardwise[gguf]'" in line]
    assert "is a GGUF file" in line and "(gguf is missing)" in line
    assert execute(sqlite_url, "select name from sqlite_master where name = 'shardwise_runs'") == []


def test_a_second_run_reads_the_kept_conversion_and_the_cache_command_lists_and_clears_it(
    sqlite_url: str,
    gguf_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shardwise.tasks.infer_shard import worker_cache

    monkeypatch.setenv("SHARDWISE_HOME", str(tmp_path / "home"))
    make_docs(sqlite_url, ROWS)
    worker_cache().close()  # as a new process: an earlier test's model stays loaded in this one
    assert main(_cli(sqlite_url, gguf_file)) == 0
    capsys.readouterr()
    assert main(["cache", "list"]) == 0
    (entry, total) = capsys.readouterr().out.splitlines()
    assert entry.startswith("gguf-causal-lm-") and f"from {hash_file(gguf_file)[:12]}" in entry
    assert total.startswith("1 converted models,") and str(tmp_path / "home" / "converted") in total
    stored = execute(sqlite_url, f"select {COLUMNS} from generated order by source_key")
    (first,) = ConvertedCache(tmp_path / "home" / "converted").entries()
    worker_cache().close()
    assert main([*_cli(sqlite_url, gguf_file), "--results-table", "again"]) == 0
    assert execute(sqlite_url, f"select {COLUMNS} from again order by source_key") == stored
    (second,) = ConvertedCache(tmp_path / "home" / "converted").entries()
    assert second.path == first.path and second.last_used > first.last_used  # read, not converted again
    capsys.readouterr()
    assert main(["cache", "clear"]) == 0
    assert "removed" in capsys.readouterr().out
    assert main(["cache", "list"]) == 0
    assert capsys.readouterr().out.startswith("0 converted models,")


@pytest.mark.parametrize("bound", ["lots", "-1", "nan"])
def test_a_bad_cache_bound_is_refused_in_one_line(
    sqlite_url: str,
    gguf_file: Path,
    bound: str,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHARDWISE_CONVERTED_MAX_GB", bound)
    make_docs(sqlite_url, 3)
    for command in (_cli(sqlite_url, gguf_file), ["cache", "list"]):
        code = main(command)
        err = capfd.readouterr().err.strip()
        assert code == 2, err
        assert err.splitlines()[-1].endswith(
            f"SHARDWISE_CONVERTED_MAX_GB={bound!r} is not a size in GiB; give a number of at least 0 "
            "(0 keeps no converted model), or unset it for the default of 8"
        ), err
    assert execute(sqlite_url, "select name from sqlite_master where name = 'shardwise_runs'") == []


def test_plan_loads_the_gguf_through_the_kept_conversion(
    sqlite_url: str,
    gguf_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHARDWISE_HOME", str(tmp_path / "home"))
    make_docs(sqlite_url, ROWS)
    assert main(["plan", *_cli(sqlite_url, gguf_file)[1:], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == ROWS + len(BAD_ROWS)
    (entry,) = ConvertedCache(tmp_path / "home" / "converted").entries()
    assert entry.key["file"] == hash_file(gguf_file)


def test_process_runner_workers_keep_and_read_the_conversion(
    sqlite_url: str, gguf_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker process of the pool equips itself from the host's home: it neither converts the GGUF
    again nor measures again what an earlier process kept there."""
    from shardwise.tasks.infer_shard import worker_cache

    monkeypatch.setenv("SHARDWISE_HOME", str(tmp_path / "home"))
    make_docs(sqlite_url, ROWS)
    worker_cache().close()
    argv = [*_cli(sqlite_url, gguf_file), "--runner", "process", "--workers", "2"]
    assert main([*argv, "--results-table", "by_process"]) == 0
    (entry,) = ConvertedCache(tmp_path / "home" / "converted").entries()
    assert entry.key["file"] == hash_file(gguf_file)
    stored = execute(sqlite_url, f"select {COLUMNS} from by_process order by source_key")
    assert main([*argv, "--results-table", "again"]) == 0
    assert execute(sqlite_url, f"select {COLUMNS} from again order by source_key") == stored
    (second,) = ConvertedCache(tmp_path / "home" / "converted").entries()
    assert second.path == entry.path and second.last_used > entry.last_used  # read, not converted again
