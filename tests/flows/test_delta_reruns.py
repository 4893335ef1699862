"""Reruns, ``--only-new`` and two racing runs into a Delta table that holds rows already, through the
command line, on the deltalake and pyarrow that the install resolves (issue 45, item 14): delta-rs
writes strings as ``string_view``, and a filter pushed into pyarrow's scan of such a file failed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from flow_data import execute, make_docs

from shardwise.flows.cli import main

pytestmark = [pytest.mark.usefixtures("prefect_harness")]


def _run(source: str, lake: Path, *extra: str) -> list[str]:
    return ["run", "--source", source, "--table", "docs", "--model", "tiny", "--results", str(lake), *extra]


def _stored(lake: Path) -> list[object]:
    """Every stored key, as often as it is stored (read whole: no filter)."""
    table = DeltaTable(str(lake / "shardwise_results"))
    return sorted(table.to_pyarrow_table(columns=["source_key"]).column(0).to_pylist())


def test_a_rerun_and_only_new_into_a_delta_table_that_holds_rows(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 40, bad=False)
    lake = tmp_path / "lake"
    assert main(_run(sqlite_url, lake)) == 0, capsys.readouterr()
    assert "40 rows scored (40 new, 0 updated, 0 unchanged)" in capsys.readouterr().out
    assert main(_run(sqlite_url, lake)) == 0, capsys.readouterr()
    assert "40 rows scored (0 new, 0 updated, 40 unchanged)" in capsys.readouterr().out
    execute(sqlite_url, "insert into docs (id, text) values (5000, 'a brand new row')")
    execute(sqlite_url, "update docs set text = 'a changed row' where id = 3")
    assert main(_run(sqlite_url, lake, "--only-new")) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "2 rows scored (1 new, 1 updated, 0 unchanged)" in out, out
    assert _stored(lake) == [*range(40), 5000]


@pytest.mark.slow
def test_two_only_new_runs_racing_into_one_delta_table_store_each_key_once(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Text keys this time (their bounds were the other filter pushed into the scan)."""
    from prefect.settings import PREFECT_API_URL

    execute(sqlite_url, "create table docs (id text primary key, text text)")
    rows = [{"id": f"k{i:03d}", "text": f"paragraph {i} about shards"} for i in range(30)]
    execute(sqlite_url, "insert into docs (id, text) values (:id, :text)", rows[:20])
    lake = tmp_path / "lake"
    assert main(_run(sqlite_url, lake)) == 0
    execute(sqlite_url, "insert into docs (id, text) values (:id, :text)", rows[20:])
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    argv = [sys.executable, "-m", "shardwise.flows.cli", *_run(sqlite_url, lake, "--only-new")]
    racing = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    racing.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    ended = [(p.wait(timeout=300), *p.communicate()) for p in racing]
    assert [code for code, _, _ in ended] == [0, 0], ended
    assert _stored(lake) == [row["id"] for row in rows], "each key stored once"
    news = sorted(out.split("rows scored (")[1].split(" new")[0] for _, out, _ in ended)
    assert sum(int(n) for n in news) == 10, ended
