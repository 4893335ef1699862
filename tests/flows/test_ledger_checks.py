"""A ledger that cannot serve is refused in one line, exit 2, before any flow run starts.

A mistyped path, a directory, a file that is no SQLite database or was cut
short, a read-only file, a read-only PostgreSQL session; and reading commands
never create a ledger.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import flow_runs, one_line

from shardwise.flows.cli import main

pytestmark = [pytest.mark.usefixtures("prefect_harness")]


def _run(docs: str, ledger: str, *extra: str) -> list[str]:
    return ["run", "--source", docs, "--table", "docs", "--model", "tiny", "--ledger", ledger, *extra]


def _refused(argv: list[str], capfd: pytest.CaptureFixture[str]) -> str:
    before = flow_runs()
    code = main(argv)
    err = one_line(capfd)
    assert code == 2, err
    assert flow_runs() == before, "a refused command started a flow run"
    assert err.startswith("shardwise: error: ") and len(err) < 400, err
    return err


def test_runs_of_a_mistyped_ledger_is_refused_and_creates_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "typo.db"
    err = _refused(["runs", "--ledger", f"sqlite:///{typo}"], capfd)
    assert "no ledger at" in err and "does not exist" in err and "--ledger" in err
    assert not typo.exists()


def test_resuming_from_a_mistyped_ledger_is_refused(
    docs: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "typo.db"
    err = _refused(_run(docs, f"sqlite:///{typo}", "--resume", "some-run"), capfd)
    assert "no ledger at" in err
    assert not typo.exists()


def test_a_ledger_in_a_folder_that_does_not_exist_is_refused(
    docs: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    err = _refused(_run(docs, f"sqlite:///{tmp_path}/nosuch/ledger.db"), capfd)
    assert "folder" in err and "does not exist" in err
    assert not (tmp_path / "nosuch").exists()


def _directory(path: Path) -> None:
    path.mkdir()


def _random(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 40)


def _truncated(path: Path) -> None:
    """A real ledger with a few runs' worth of pages, cut after its first pages."""
    import sqlite3

    whole = path.with_suffix(".whole")
    with sqlite3.connect(whole) as conn:
        conn.execute("create table shardwise_runs (run_id text primary key, parameters text)")
        rows = [(str(i), "x" * 900) for i in range(200)]
        conn.executemany("insert into shardwise_runs values (?, ?)", rows)
    conn.close()
    path.write_bytes(whole.read_bytes()[:3000])


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (_directory, "is a directory"),
        (_random, "is not a readable SQLite database"),
        (_truncated, "is not a readable SQLite database"),
    ],
    ids=["directory", "random-bytes", "truncated"],
)
def test_a_broken_ledger_is_one_line_before_the_flow(
    docs: str, tmp_path: Path, make: object, says: str, capfd: pytest.CaptureFixture[str]
) -> None:
    ledger = tmp_path / "ledger.db"
    make(ledger)  # type: ignore[operator]
    before = ledger.read_bytes() if ledger.is_file() else None
    for argv in (_run(docs, f"sqlite:///{ledger}"), ["runs", "--ledger", f"sqlite:///{ledger}"]):
        err = _refused(argv, capfd)
        assert says in err and "INSERT" not in err, err
    assert (ledger.read_bytes() if ledger.is_file() else None) == before  # nothing written to it


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[Path]:
    """A valid ledger that not even root may write: ``chattr +i`` (read-only for any user)."""
    from shardwise.results import Ledger

    path = tmp_path / "readonly.db"
    with Ledger(f"sqlite:///{path}") as ledger:
        ledger.ensure()
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.fail(f"chattr +i is needed to make a file read-only for root: {made.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_read_only_ledger_is_refused_for_a_run_and_read_by_runs(
    docs: str, immutable: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    err = _refused(_run(docs, f"sqlite:///{immutable}"), capfd)
    assert "is read-only" in err and "writable" in err
    assert main(["runs", "--ledger", f"sqlite:///{immutable}"]) == 0
    assert "no runs recorded" in capfd.readouterr().out


@pytest.mark.postgres
def test_a_read_only_postgresql_session_is_refused_for_a_run(
    docs: str, pg_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    read_only = f"{pg_url}?options=-c%20default_transaction_read_only%3Don"
    err = _refused(_run(docs, read_only), capfd)
    assert "is read-only for this session" in err
