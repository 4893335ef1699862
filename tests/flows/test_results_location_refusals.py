"""Results that no retry can write to are refused in one line, exit 2, before any flow run starts: a
Delta table whose log is corrupt, a local results path under a regular file, and a directory in which
nothing can be written."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from cli_helpers import flow_runs, ledger_runs, one_line
from deltalake import write_deltalake

from shardwise.flows.cli import main

pytestmark = [pytest.mark.usefixtures("prefect_harness")]


def _run(docs: str, results: str, *extra: str) -> list[str]:
    return ["run", "--source", docs, "--table", "docs", "--model", "tiny", "--results", results, *extra]


def _refused(argv: list[str], capfd: pytest.CaptureFixture[str]) -> str:
    before = flow_runs()
    code = main(argv)
    err = one_line(capfd)
    assert code == 2, err
    assert flow_runs() == before, "a refused command started a flow run"
    assert err.startswith("shardwise: error: "), err
    return err


def test_a_delta_table_with_a_cut_short_log_is_refused_before_the_run(
    docs: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    lake = tmp_path / "lake"
    table = pa.table({"source_key": pa.array([1, 2], pa.int64())})
    write_deltalake(str(lake / "scores"), table)
    write_deltalake(str(lake / "scores"), table, mode="append")
    commit = lake / "scores" / "_delta_log" / "00000000000000000001.json"
    kept = commit.read_bytes()
    commit.write_bytes(kept[: len(kept) // 2])
    err = _refused(_run(docs, str(lake), "--results-table", "scores"), capfd)
    assert f"Delta table delta:{lake}/scores has a corrupt log" in err, err
    assert "_delta_log" in err and "restore that file" in err and "--results-table" in err, err
    assert "DeltaError" not in err and "<unknown>" not in err, err
    assert commit.read_bytes() == kept[: len(kept) // 2], "the refused run touched the table"


@pytest.mark.parametrize("results_format", ["delta", "parquet"])
@pytest.mark.parametrize("under", ["the file", "a folder in the file"])
def test_results_under_a_regular_file_are_refused_before_the_run(
    docs: str, tmp_path: Path, capfd: pytest.CaptureFixture[str], results_format: str, under: str
) -> None:
    regular = tmp_path / "notes.txt"
    regular.write_text("a user's file\n")
    results = regular if under == "the file" else regular / "out"
    err = _refused(_run(docs, str(results), "--results-format", results_format), capfd)
    assert f"'{regular}' is not a directory" in err and "give --results a directory" in err, err
    assert regular.read_text() == "a user's file\n"


def test_a_results_path_under_a_file_given_by_reference_names_the_reference_only(
    docs: str, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    regular = tmp_path / "private-notes.txt"
    regular.write_text("x")
    monkeypatch.setenv("SHARDWISE_TEST_RESULTS", str(regular / "out"))
    err = _refused(_run(docs, "env:SHARDWISE_TEST_RESULTS"), capfd)
    assert "'env:SHARDWISE_TEST_RESULTS' is not a directory" in err, err
    assert "private-notes" not in err, err


@pytest.mark.parametrize("results_format", ["delta", "parquet"])
def test_results_in_a_directory_no_one_can_write_in_are_refused_before_the_run(
    docs: str, capfd: pytest.CaptureFixture[str], results_format: str
) -> None:
    """``/proc/self`` is a directory in which nothing can be made, whoever runs: once retried for two
    minutes as an outage of the store (issue 45, item 22)."""
    err = _refused(_run(docs, "/proc/self", "--results-format", results_format), capfd)
    assert "results '/proc/self': '/proc/self' is a directory this user cannot write in" in err, err
    assert "give --results a directory you can write in" in err, err
    assert ledger_runs(docs) == 0, "nothing is recorded for a refused run"
