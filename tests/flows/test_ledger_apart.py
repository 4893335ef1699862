"""The ledger apart from the results (``--ledger``): where it defaults to, which commands take it, and
only-new against results in another database."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from cli_helpers import one_line
from flow_data import execute, make_docs

from shardwise.flows.cli import main

LEDGER_TABLES = {"shardwise_runs", "shardwise_shards", "shardwise_chunks", "shardwise_errors"}


def _tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


@pytest.mark.usefixtures("prefect_harness")
def test_results_and_ledger_in_three_databases(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, results, ledger = (f"sqlite:///{tmp_path / name}.db" for name in ("source", "results", "ledger"))
    make_docs(source, 50)  # and three bad rows
    run = ["run", "--source", source, "--table", "docs", "--model", "tiny", "--shards", "3"]
    where = ["--results", results, "--results-table", "scores", "--ledger", ledger]
    assert main([*run, *where]) == 0, capsys.readouterr().err
    assert "50 rows scored (50 new" in capsys.readouterr().out

    assert _tables(ledger) >= LEDGER_TABLES
    assert not LEDGER_TABLES & (_tables(results) | _tables(source))  # the ledger is only where it was told
    assert "scores" in _tables(results) and "shardwise_commits" in _tables(results)
    assert execute(results, "select count(*), count(distinct source_key) from scores") == [(50, 50)]
    assert execute(ledger, "select count(*) from shardwise_errors") == [(3,)]
    (run_id,) = execute(ledger, "select run_id from shardwise_runs")[0]

    assert main(["runs", "--ledger", ledger]) == 0
    assert run_id in capsys.readouterr().out

    # Only-new against results in another database: read from the results, not anti-joined.
    assert main([*run, *where, "--only-new"]) == 0
    assert "0 rows scored" in capsys.readouterr().out
    execute(source, "update docs set text = 'changed text' where id = 7")
    execute(source, "insert into docs (id, text) values (5000, 'a brand new row')")
    assert main([*run, *where, "--only-new"]) == 0
    assert "2 rows scored (1 new, 1 updated" in capsys.readouterr().out
    assert execute(results, "select count(*) from scores") == [(51,)]

    # A redrive and a resume find the run in that ledger.
    execute(source, "update docs set text = 'fixed' where id = 900001")
    assert main(["redrive", *run[1:], *where, "--run", run_id]) == 0
    assert "1 row scored (1 new" in capsys.readouterr().out


def test_runs_without_a_ledger_to_find_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs"]) == 2
    assert "give --ledger URL or --results" in one_line(capsys)


@pytest.mark.usefixtures("prefect_harness")
def test_a_ledger_that_is_not_a_database_is_refused_before_anything_runs(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 5)
    argv = ["run", "--source", sqlite_url, "--table", "docs", "--model", "tiny"]
    assert main([*argv, "--ledger", str(tmp_path / "ledger")]) == 2
    assert "is not a database URL" in one_line(capsys)
    assert "shardwise_runs" not in _tables(sqlite_url)


@pytest.mark.usefixtures("prefect_harness")
def test_a_parquet_source_into_a_local_lake_keeps_its_ledger_beside_the_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import polars as pl

    landing, lake = tmp_path / "landing", tmp_path / "lake"
    landing.mkdir()
    pl.DataFrame({"id": range(40), "text": [f"paragraph number {i}" for i in range(40)]}).write_parquet(
        landing / "part-0.parquet"
    )
    run = [
        "run",
        "--source",
        str(landing),
        "--model",
        "tiny",
        "--results",
        str(lake),
        "--results-table",
        "emb",
    ]
    assert main([*run, "--results-format", "parquet"]) == 0, capsys.readouterr().err
    assert "40 rows scored (40 new" in capsys.readouterr().out
    ledger = f"sqlite:///{lake / 'shardwise_ledger.db'}"
    assert execute(ledger, "select count(*) from shardwise_runs") == [(1,)]
    assert main(["runs", "--results", str(lake)]) == 0
    assert "completed" in capsys.readouterr().out
    assert main([*run, "--results-format", "parquet", "--only-new"]) == 0
    assert "0 rows scored" in capsys.readouterr().out
    # One folder holds one format: Delta into the Parquet table's folder is refused before it runs.
    assert main(run) == 2
    assert "already holds a parquet table" in one_line(capsys)
