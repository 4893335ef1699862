"""Two third-party source kinds that both declare ``delimiter`` install side by side: each option is
namespaced by its kind (``--pipes-delimiter``, ``--semis-delimiter``), each reaches its own kind typed,
and neither breaks the other (issue 46, item 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = """
from dataclasses import dataclass

from pydantic import Field

from shardwise.sources.parquet.source import ParquetSource
from shardwise.sources.registry import SourceKindOptions

SEEN = []


def _kind(kind_name, suffix, default):
    class Options(SourceKindOptions):
        delimiter: str = Field(default, description=f"What separates the fields of a {suffix} file.")

    @dataclass(frozen=True)
    class Kind:
        name: str = kind_name
        label: str = f"{suffix} files"
        extra: str | None = None
        schemes: tuple[str, ...] = ()
        suffixes: tuple[str, ...] = (suffix,)
        whole_files: bool = False
        options: type = Options

        def open(self, location, options, own):
            assert isinstance(own, Options)  # its own typed value, never loose pairs
            SEEN.append([self.name, own.delimiter])
            return ParquetSource(location, options.key, options.text_column)

        def on_this_host(self, location):
            return True

        def watcher(self, spec, emit, *, seen=None, **options):
            raise NotImplementedError("a test kind is not watched")

    return Kind()


PIPES = _kind("pipes", ".psv", "|")
SEMIS = _kind("semis", ".ssv", ";")
"""

OPEN = """
import json, sys

from shardwise.flows.cli import _parser
from shardwise.flows.cli_options import score_params
from shardwise.sources import open_source

import two_delimiters

spec = score_params(_parser().parse_args(sys.argv[1:])).to_spec()
with open_source(spec.source.location, kind_options=spec.source.kind_options()):
    pass
print(json.dumps(two_delimiters.SEEN))
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """One package registering two source kinds, each with a ``delimiter``, installed as pip would."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "two_delimiters.py").write_text(PLUGIN)
    info = site / "two_delimiters-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: two-delimiters\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[shardwise.sources]\npipes = two_delimiters:PIPES\nsemis = two_delimiters:SEMIS\n"
    )
    return {**os.environ, "PYTHONPATH": str(site)}


def _python(env: dict[str, str], code: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, timeout=180
    )


def _folder(tmp_path: Path, name: str) -> str:
    folder = tmp_path / name.split(".")[0]
    folder.mkdir()
    (folder / name).write_text("id|text\n1|a\n")
    return str(folder)


@pytest.mark.slow
def test_two_kinds_declaring_delimiter_each_take_their_own_flag(env: dict[str, str], tmp_path: Path) -> None:
    cli = "import sys; from shardwise.flows.cli import main; sys.exit(main(sys.argv[1:]))"
    shown = _python(env, cli, "run", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "--pipes-delimiter DELIMITER" in shown.stdout and "--semis-delimiter DELIMITER" in shown.stdout
    assert "a pipes source" in shown.stdout and "a semis source" in shown.stdout  # a --help group per kind
    assert "--where SQL" in shown.stdout, "an option no other kind declares keeps its plain flag"

    pipes, semis = _folder(tmp_path, "a.psv"), _folder(tmp_path, "b.ssv")
    both = ("--pipes-delimiter", "!", "--semis-delimiter", ";")  # the other kind's at its default
    opened = _python(env, OPEN, "run", "--source", pipes, *both)
    assert opened.returncode == 0, opened.stderr
    assert json.loads(opened.stdout) == [["pipes", "!"]]
    opened = _python(env, OPEN, "run", "--source", semis, "--semis-delimiter", ",")
    assert opened.returncode == 0, opened.stderr
    assert json.loads(opened.stdout) == [["semis", ","]]

    refused = _python(env, OPEN, "run", "--source", pipes, "--semis-delimiter", ",")
    assert refused.returncode != 0
    assert "delimiter ',' applies to semis sources" in refused.stderr, refused.stderr
    assert "is read as a pipes source; drop --semis-delimiter" in refused.stderr, refused.stderr


def test_the_form_has_a_section_per_kind_each_with_its_own_delimiter(env: dict[str, str]) -> None:
    code = (
        "import json; from shardwise.flows.params import ScoreParams; "
        "print(json.dumps(ScoreParams.model_json_schema()))"
    )
    shown = _python(env, code)
    assert shown.returncode == 0, shown.stderr
    schema = json.loads(shown.stdout)
    sections = schema["$defs"]["SourceKindSections"]["properties"]
    assert {"pipes", "semis", "sql"} <= set(sections)
    defs = schema["$defs"]
    for kind, default in (("pipes", "|"), ("semis", ";")):
        ref = sections[kind]["$ref"].rsplit("/", 1)[-1]
        assert defs[ref]["properties"]["delimiter"]["default"] == default
