"""Bad input at the command line (issue 24): one line naming the value and the fix, exit 2, before anything
runs, nothing lost, and never a secret (a password, a file name from a system directory) in the line."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import ledger_runs, one_line

from shardwise.flows.cli import main


def test_a_model_path_that_is_no_model_directory_is_not_listed(
    docs: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """``--model /etc`` once listed /etc in its error; a stand-in holds names that must not show."""
    system = tmp_path / "etc"
    system.mkdir()
    for name in ("shadow", "id_rsa.backup", "payroll-2024.csv"):
        (system / name).write_text("private")
    code = main(["run", "--source", docs, "--table", "docs", "--model", str(system)])
    err = one_line(capfd)
    assert code == 2, err
    assert f"model directory '{system}' is not a Hugging Face model directory" in err, err
    assert "lacks config.json" in err and "save_pretrained()" in err, err
    for name in ("shadow", "id_rsa", "payroll"):
        assert name not in err, err
    assert ledger_runs(docs) == 0


# An unencoded password: refused naming where the URL came from, with no piece of the password shown.

UNENCODED = {
    "slash and space": "Qz9/Kx7 Vw4",
    "at sign": "Qz9@Kx7 Vw4",  # SQLAlchemy took 'Kx7 Vw4@host' for the host and echoed it
    "at sign and colon": "Qz9/Kx7@Jm2:Vw4",  # SQLAlchemy raised a bare ValueError quoting 'Vw4@host'
    "stray percent": "Qz9%Kx7",
    "not ascii": "Qz9ä Kx7",
}
"""Passwords written raw into a URL; each of their pieces is distinctive, so a leaked piece is found."""


def _pieces(password: str) -> set[str]:
    """The password, its percent-encoded spelling, and every run of two or more letters or digits in it."""
    from urllib.parse import quote

    runs = "".join(c if c.isalnum() and c.isascii() else " " for c in password).split()
    return {password, quote(password, safe=""), *(r for r in runs if len(r) >= 2)}


def _url(password: str) -> str:
    return f"postgresql+psycopg://root:{password}@127.0.0.1:1/nowhere"  # never reached: refused first


def _refused_without_the_password(
    argv: list[str], named: str, password: str, capfd: pytest.CaptureFixture[str]
) -> None:
    code = main(argv)
    err = one_line(capfd)
    assert code == 2, err
    assert err.startswith(f"shardwise: error: {named}: the URL's password (or user name) is not "), err
    assert "percent-encoded" in err and "urllib.parse.quote" in err, err
    leaked = [piece for piece in _pieces(password) if piece in err]
    assert not leaked, f"{leaked} of the password in: {err}"


@pytest.mark.parametrize("option", ["--source", "--results", "--ledger"])
@pytest.mark.parametrize("password", list(UNENCODED.values()), ids=list(UNENCODED))
def test_an_unencoded_password_in_an_option_is_refused_unshown(
    docs: str, option: str, password: str, capfd: pytest.CaptureFixture[str]
) -> None:
    given = {"--source": docs, "--results": docs, "--ledger": docs, option: _url(password)}
    argv = ["run", "--table", "docs", "--model", "tiny", *(x for o, v in given.items() for x in (o, v))]
    _refused_without_the_password(argv, option, password, capfd)
    assert ledger_runs(docs) == 0


@pytest.mark.parametrize("password", list(UNENCODED.values()), ids=list(UNENCODED))
def test_an_unencoded_password_reached_through_env_is_refused_naming_the_reference(
    docs: str, password: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SW_UNENCODED_URL", _url(password))
    for option in ("--source", "--results", "--ledger"):
        given = {"--source": docs, "--results": docs, option: "env:SW_UNENCODED_URL"}
        argv = ["run", "--table", "docs", "--model", "tiny", *(x for o, v in given.items() for x in (o, v))]
        _refused_without_the_password(argv, "env:SW_UNENCODED_URL", password, capfd)
    assert ledger_runs(docs) == 0


@pytest.mark.usefixtures("prefect_harness")
def test_an_unencoded_password_in_a_secret_block_is_refused_naming_the_block(
    docs: str, capfd: pytest.CaptureFixture[str]
) -> None:
    from prefect.blocks.system import Secret

    password = UNENCODED["at sign and colon"]
    Secret(value=_url(password)).save("sw-unencoded", overwrite=True)
    argv = ["run", "--source", docs, "--table", "docs", "--model", "tiny", "--results", "secret:sw-unencoded"]
    _refused_without_the_password(argv, "secret:sw-unencoded", password, capfd)
    assert ledger_runs(docs) == 0


@pytest.mark.parametrize("option", ["--results", "--ledger"])
def test_runs_refuses_an_unencoded_password_unshown(option: str, capfd: pytest.CaptureFixture[str]) -> None:
    password = UNENCODED["at sign"]
    _refused_without_the_password(["runs", option, _url(password)], option, password, capfd)


def test_watch_refuses_an_unencoded_password_unshown(capfd: pytest.CaptureFixture[str]) -> None:
    password = UNENCODED["slash and space"]
    argv = ["watch", "--source", _url(password), "--table", "docs", "--name", "docs", "--mode", "poll"]
    _refused_without_the_password(argv, "--source", password, capfd)


def test_a_schema_on_a_sqlite_source_is_refused_naming_the_table_alone(
    docs: str, capfd: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--source", docs, "--table", "main.docs", "--model", "tiny"])
    err = one_line(capfd)
    assert code == 2, err
    assert "table 'main.docs' names a schema ('main')" in err and "SQLite" in err, err
    assert err.endswith("give the table alone: --table docs"), err
    assert ledger_runs(docs) == 0
