"""A plug-in source kind that claims what a built-in kind reads (a URL scheme, a file suffix) is never
handed those locations: Shardwise's kinds are matched first, and a scheme or suffix two installed kinds
claim is refused in one line naming both, before either opens anything (issue 45, item 19)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import ledger_runs

_PLUGIN = """
from dataclasses import dataclass
from pathlib import Path

from shardwise.sources.registry import SourceKindOptions


@dataclass(frozen=True)
class Greedy:
    name: str
    schemes: tuple[str, ...]
    suffixes: tuple[str, ...]
    label: str = "what others read"
    extra: str | None = None
    whole_files: bool = False
    options: type = SourceKindOptions

    def open(self, location, options, own):
        Path(__file__).with_name("opened").write_text(location)  # what a thief would keep
        raise AssertionError("a location another kind claims is never handed to this one")

    def on_this_host(self, location):
        raise AssertionError("a location another kind claims is never asked of this one")

    def watcher(self, spec, emit, *, seen=None, **options):
        raise AssertionError("a location another kind claims is never watched by this one")


DATABASES = Greedy("aaa-sql", ("sqlite", "postgresql"), ())
TABLES = Greedy("aaa-csv", (), (".csv",))
"""


def _install(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A package ``aaa-sources`` installed into a folder of its own, as pip would leave it."""
    site = tmp_path / "site"
    (site / "aaa_sources").mkdir(parents=True)
    (site / "aaa_sources" / "__init__.py").write_text(_PLUGIN)
    info = site / "aaa_sources-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: aaa-sources\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[shardwise.sources]\naaa-sql = aaa_sources:DATABASES\naaa-csv = aaa_sources:TABLES\n"
    )
    return {**os.environ, "PYTHONPATH": str(site)}, site / "aaa_sources" / "opened"


def _refused(env: dict[str, str], *argv: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "shardwise.flows.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    err = done.stderr.strip()
    assert done.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, done.stderr
    return err


@pytest.mark.slow
def test_a_scheme_or_suffix_two_kinds_claim_is_refused_naming_both(docs: str, tmp_path: Path) -> None:
    env, opened = _install(tmp_path)
    lake = str(tmp_path / "lake")
    err = _refused(env, "run", "--source", docs, "--table", "docs", "--model", "tiny", "--results", lake)
    assert "source scheme 'sqlite' is claimed by 2 installed source kinds, 'sql' (" in err, err
    assert "and 'aaa-sql' (aaa_sources); uninstall the package of all but one" in err, err

    secret = "postgresql://root:s3cret-pw@127.0.0.1:5432/test"
    err = _refused(env, "plan", "--source", secret, "--table", "docs", "--model", "tiny", "--results", lake)
    assert "source scheme 'postgresql' is claimed by 2 installed source kinds" in err, err
    assert "s3cret-pw" not in err

    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "part-0.csv").write_text("id,text\n1,hello\n")
    err = _refused(env, "run", "--source", str(folder), "--model", "tiny", "--results", lake)
    assert (
        "source file suffix '.csv' (of 'part-0.csv') is claimed by 2 installed source kinds, 'csv' (" in err
    )
    assert "'aaa-csv' (aaa_sources)" in err, err
    assert not opened.exists(), f"the plug-in was handed {opened.read_text()!r}"
    assert ledger_runs(docs) == 0 and not Path(lake).exists(), "nothing ran"
