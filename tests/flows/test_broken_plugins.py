"""One broken plug-in breaks no other command: a third-party sink, source or model kind whose module fails
to import leaves ``shardwise runs`` and a run of built-in kinds working, and is named when chosen (the
one loader of the three groups, :mod:`shardwise.entry_points`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import ledger_runs

pytestmark = [pytest.mark.usefixtures("prefect_harness")]

_GROUPS = ["shardwise.sinks", "shardwise.sources", "shardwise.models"]


def _install_broken(tmp_path: Path, group: str) -> dict[str, str]:
    """A package registering ``broken`` in ``group``, whose module raises as it is imported."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "broken_plugin.py").write_text("raise RuntimeError('half-installed')\n")
    info = site / "broken_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken_plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\nbroken = broken_plugin:KIND\n")
    return {**os.environ, "PYTHONPATH": str(site)}


def _cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from shardwise.flows.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
@pytest.mark.parametrize("group", _GROUPS)
def test_a_broken_plugin_leaves_runs_and_built_in_kinds_working(
    docs: str, tmp_path: Path, group: str
) -> None:
    env = _install_broken(tmp_path, group)
    listed = _cli(env, "runs", "--ledger", docs)
    assert listed.returncode == 0, listed.stderr
    run = ["run", "--source", docs, "--table", "docs", "--model", "tiny", "--progress", "none"]
    ran = _cli(env, *run)
    assert ran.returncode == 0, ran.stderr
    assert ledger_runs(docs) == 1, "the run of built-in kinds went through"
    chosen = {
        "shardwise.sinks": ["--results", str(tmp_path / "out"), "--results-format", "broken"],
        "shardwise.models": ["--model", "broken"],
    }.get(group)
    if chosen is None:
        return  # a source kind is chosen by what it claims, which a kind that cannot load does not say
    what = "sink kind" if group == "shardwise.sinks" else "model"
    refused = _cli(env, *run[:7], *chosen)  # a later --model wins
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    said = f"{what} 'broken' (broken_plugin:KIND) cannot be loaded: RuntimeError: half-installed"
    assert said in refused.stderr, refused.stderr
