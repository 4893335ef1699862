"""CSV and JSON Lines files through ``shardwise run`` (issue 45, items 15-17 and 22): a file that cannot be
read is one line naming it and its line, exit 2, before anything is recorded; every CSV value is scored as
written; a file changed under a run's plan is named by its path, and no resume is offered that cannot work."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import ledger_runs, one_line
from flow_data import execute

from shardwise.flows.cli import main
from shardwise.results import Ledger


def _run(source: Path, results: str, *extra: str) -> list[str]:
    return [
        "run", "--source", str(source), "--model", "tiny", "--results", results, "--results-table", "emb",
        "--progress", "none", *extra,
    ]  # fmt: skip


@pytest.fixture
def results(sqlite_url: str) -> str:
    """An empty ledger, so that "nothing was recorded" is a count."""
    with Ledger(sqlite_url) as ledger:
        ledger.ensure()
    return sqlite_url


UNREADABLE = {
    "a quote left open": (
        "a.csv",
        b'id,text\n1,one\n2,two\n3,"three unclosed\n' + b"".join(b"%d,n%d\n" % (i, i) for i in range(4, 11)),
        "CSV file 'a.csv' cannot be read: the quoted value starting on line 4 is never closed, so it runs "
        "past the end of the file, swallowing every line after it; close its quote",
    ),
    "a latin-1 byte in JSON Lines": (
        "a.jsonl",
        b'{"id": 1, "text": "one"}\n{"id": 2, "text": "caf\xe9"}\n',
        "JSON Lines file 'a.jsonl' cannot be read: line 2 holds byte 0xe9, which is not UTF-8 (is it "
        "Latin-1?); save it as UTF-8",
    ),
    "a UTF-16 CSV": (
        "a.csv",
        "id,text\n1,one\n".encode("utf-16"),
        "CSV file 'a.csv' cannot be read: it is UTF-16 (it starts with UTF-16's byte-order mark), not UTF-8; "
        "save it as UTF-8",
    ),
    "a 20 MiB CSV row": (
        "a.csv",
        b"id,text\n1,one\n2," + b"x" * (20 << 20) + b"\n",
        "CSV file 'a.csv' cannot be read: the values of row 2 hold 20,971,521 bytes, more than the 16 MiB a "
        "row may hold; split or shorten its values",
    ),
}


@pytest.mark.parametrize(("name", "data", "said"), list(UNREADABLE.values()), ids=list(UNREADABLE))
def test_a_file_that_cannot_be_read_is_refused_in_one_line_before_anything_runs(
    tmp_path: Path, results: str, name: str, data: bytes, said: str, capfd: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in"
    source.mkdir()
    (source / name).write_bytes(data)
    code = main(_run(source, results))
    err = one_line(capfd)
    assert code == 2, err
    assert err.startswith(f"shardwise: error: {said}"), err
    assert ledger_runs(results) == 0


@pytest.mark.usefixtures("prefect_harness")
def test_every_csv_value_is_scored_as_written_and_a_bad_line_is_counted_apart_from_a_null_key(
    tmp_path: Path, results: str, capfd: pytest.CaptureFixture[str]
) -> None:
    keys = ["NA", "null", "01", "1", "12345678901234567890", "12345678901234567891", "1.50", "1.5"]
    texts = ["NA", "null", "nan", "N/A", "1.50", "-0", "x", "y"]
    source = tmp_path / "in"
    source.mkdir()
    rows = "".join(f"{k},{t}\n" for k, t in zip(keys, texts, strict=True))
    (source / "a.csv").write_text(f"id,text\n{rows}2,a,b\n,no key\n")
    where = ["--source", str(source), "--results", results, "--results-table", "emb"]
    assert main(["plan", *where, "--model", "tiny"]) == 0
    out = capfd.readouterr().out
    assert "8 rows to score" in out and "1 row with a NULL key is skipped: not scored" in out, out
    assert "1 unparsable line is skipped: not scored" in out, out
    assert main(_run(source, results)) == 0
    out = capfd.readouterr().out
    assert "8 rows scored" in out and "0 dead letters" in out, out
    assert "2 skipped (1 with a NULL key, 1 unparsable)" in out, out
    assert sorted(k for (k,) in execute(results, "select source_key from emb")) == sorted(keys)


@pytest.mark.usefixtures("prefect_harness")
def test_a_file_changed_under_the_plan_is_named_by_its_path_with_no_resume_that_cannot_work(
    tmp_path: Path, results: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Another writer appends to the file between planning and the shard's read (the plan is real; the
    append is made once planning returns)."""
    from shardwise.sources.csv_jsonl import CsvJsonlSource

    source = tmp_path / "in"
    source.mkdir()
    path = source / "a.csv"
    path.write_text("id,text\n" + "".join(f"{i},row {i}\n" for i in range(20)))
    plan_sized = CsvJsonlSource.plan_sized

    def plan_then_append(self: CsvJsonlSource, *args: object, **kwargs: object) -> object:
        plan = plan_sized(self, *args, **kwargs)  # type: ignore[arg-type]
        with path.open("a") as file:
            file.write("20,row 20\n")
        return plan

    monkeypatch.setattr(CsvJsonlSource, "plan_sized", plan_then_append)
    assert main(_run(source, results)) == 1
    err = capfd.readouterr().err
    assert f"SourceChangedError: '{path}' changed since it was listed for the run's plan" in err, err
    assert "neither a retry nor --resume can finish it: start a new run" in err, err
    assert "Parquet" not in err and "--resume" not in err.replace("nor --resume can", ""), err

    monkeypatch.setattr(CsvJsonlSource, "plan_sized", plan_sized)
    assert main(_run(source, results)) == 0, capfd.readouterr().err
    assert "21 rows scored" in capfd.readouterr().out
