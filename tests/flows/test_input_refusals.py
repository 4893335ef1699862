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
