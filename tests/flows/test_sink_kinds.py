"""Sinks are kinds chosen by name or by URL, each owning its options (shardwise.sinks.registry): a kind
installed by another package is chosen and configured exactly like a built-in one, and an option given
for another kind than the results' is refused in one line, before any flow run starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import flow_runs, ledger_runs, one_line
from spec_builder import flat_spec

from shardwise.errors import ConfigError
from shardwise.flows.cli import main
from shardwise.flows.params import ScoreParams
from shardwise.sinks.registry import sink_kinds

pytestmark = [pytest.mark.usefixtures("prefect_harness")]


def _run(docs: str, *extra: str) -> list[str]:
    return ["run", "--source", docs, "--table", "docs", "--model", "tiny", *extra]


def _refused(argv: list[str], capfd: pytest.CaptureFixture[str]) -> str:
    before = flow_runs()
    code = main(argv)
    err = one_line(capfd)
    assert code == 2, err
    assert flow_runs() == before, "a refused command started a flow run"
    return err


def test_the_built_in_kinds_register_through_the_entry_point_group() -> None:
    assert {"sql", "delta", "parquet"} <= set(sink_kinds())
    assert sink_kinds()["sql"].schemes and not sink_kinds()["delta"].schemes


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--index", "hnsw"], "index 'hnsw' applies to results in a database table"),
        (["--embedding-type", "halfvec"], "drop --embedding-type, or send the results there"),
    ],
)
def test_an_option_of_another_kind_is_refused_naming_its_flag(
    docs: str, tmp_path: Path, extra: list[str], said: str, capfd: pytest.CaptureFixture[str]
) -> None:
    err = _refused(_run(docs, "--results", str(tmp_path / "lake"), *extra), capfd)
    assert said in err and "a Delta Lake table" in err, err
    assert not (tmp_path / "lake").exists(), "nothing is created for a refused run"


def test_a_default_spelled_out_for_another_kind_is_not_given(docs: str, tmp_path: Path) -> None:
    argv = _run(docs, "--results", str(tmp_path / "lake"), "--index", "none", "--embedding-type", "auto")
    assert main(["plan", *argv[1:]]) == 0


def test_a_location_format_for_a_database_and_sql_for_a_location_are_refused(
    docs: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    err = _refused(_run(docs, "--results-format", "parquet"), capfd)
    assert "applies to results in Parquet files" in err and "drop --results-format" in err, err
    err = _refused(_run(docs, "--results", str(tmp_path), "--results-format", "sql"), capfd)
    assert "takes a database URL" in err and "is a location" in err, err


def test_an_unknown_kind_is_refused_naming_the_installed_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"results format 'nope' is not an installed sink kind; known: .*delta"
    ):
        flat_spec(source="s", results="r", results_table="t", results_format="nope")
    with pytest.raises(
        ConfigError, match=r"results options are given for sink kind 'nope', which is not installed; .*sql"
    ):
        flat_spec(source="s", results="r", results_table="t", results_options={"nope": 1})


def test_the_flows_parameters_nest_each_kinds_options_in_a_section() -> None:
    source = {"location": "sqlite:///x.db", "table": "docs"}
    params = ScoreParams.model_validate(
        {"source": source, "results": {"options": {"sql": {"index": "hnsw"}}}}
    )
    (given,) = params.to_spec().results.options
    assert given[0] == "sql" and given[1].index == "hnsw"  # the sql kind's own options, typed
    assert ScoreParams.model_validate({"source": source}).to_spec().results.sink_options() == {}
    schema = ScoreParams.model_json_schema()
    assert "sql" in schema["$defs"]["ResultsOptions"]["properties"]
    assert schema["$defs"]["ResultsParams"]["properties"]["options"]["$ref"] == "#/$defs/ResultsOptions"
    with pytest.raises(ValueError, match="index"):
        ScoreParams.model_validate({"source": source, "results": {"options": {"sql": {"index": "ivf"}}}})


_PLUGIN = """
from shardwise.sinks.parquet import ParquetKind
from shardwise.sinks.registry import SinkOptions
from pydantic import Field


class CarbonOptions(SinkOptions):
    carbon_label: str = Field("plain", description="A label written nowhere (a test kind's option).")


class CarbonKind(ParquetKind):
    name = "carbon"
    label = "carbon copies"
    options = CarbonOptions


KIND = CarbonKind()
"""


def _install(tmp_path: Path, name: str, entry: str, module: str) -> dict[str, str]:
    """A package installed into a folder of its own, as pip would (a dist-info with its entry points)."""
    site = tmp_path / "site"
    (site / "carbon_sink.py").parent.mkdir(parents=True, exist_ok=True)
    (site / "carbon_sink.py").write_text(module)
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[shardwise.sinks]\n{entry}\n")
    return {**os.environ, "PYTHONPATH": str(site)}


def _cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from shardwise.flows.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_a_kind_from_another_package_is_chosen_and_configured_like_a_built_in(
    docs: str, tmp_path: Path
) -> None:
    env = _install(tmp_path, "carbon-sink", "carbon = carbon_sink:KIND", _PLUGIN)
    shown = _cli(env, "run", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "carbon" in shown.stdout and "--carbon-label" in shown.stdout, shown.stdout
    out = tmp_path / "out"
    ran = _cli(
        env, *_run(docs, "--results", str(out), "--results-format", "carbon", "--carbon-label", "x"),
        "--progress", "none",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert list((out / "shardwise_results").rglob("*.parquet")), "the plug-in's sink wrote the results"
    refused = _cli(env, *_run(docs, "--results", str(out), "--carbon-label", "x"))
    assert refused.returncode == 2 and "drop --carbon-label" in refused.stderr, refused.stderr


@pytest.mark.slow
def test_a_kind_that_declares_another_kinds_option_takes_its_own_flag_as_does_the_other(
    docs: str, tmp_path: Path
) -> None:
    """Two installed kinds that both declare ``index`` each have ``--KIND-index``; the sql kind's, given
    for the plug-in's results, is refused in one line by its own flag."""
    clash = _PLUGIN.replace("carbon_label: str", "index: str")
    env = _install(tmp_path, "clash-sink", "carbon = carbon_sink:KIND", clash)
    shown = _cli(env, "run", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "--sql-index {none,hnsw}" in shown.stdout and "--carbon-index INDEX" in shown.stdout, shown.stdout
    out = str(tmp_path / "out")
    refused = _cli(env, *_run(docs, "--results", out, "--results-format", "carbon", "--sql-index", "hnsw"))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "applies to results in" in refused.stderr and "drop --sql-index" in refused.stderr, refused.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "said"),
    [
        ("raise RuntimeError('half-installed')", "cannot be loaded: RuntimeError: half-installed"),
        ("import shardwise_no_such_package", "needs package 'shardwise_no_such_package'"),
        ("KIND = object()", "is not a SinkKind named 'carbon'"),
    ],
)
def test_a_broken_kind_fails_only_the_runs_that_choose_it(
    docs: str, tmp_path: Path, module: str, said: str
) -> None:
    """One package whose kind cannot be loaded leaves every other kind and command working (issue 45,
    item 12); choosing it is one line, exit 2, before anything runs."""
    env = _install(tmp_path, "broken-sink", "carbon = carbon_sink:KIND", module)
    shown = _cli(env, "run", "--help")
    assert shown.returncode == 0 and "carbon" in shown.stdout, shown.stderr
    planned = _cli(env, "plan", *_run(docs, "--results", str(tmp_path / "lake"))[1:])
    assert planned.returncode == 0, planned.stderr
    refused = _cli(env, *_run(docs, "--results", str(tmp_path / "out"), "--results-format", "carbon"))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert f"sink kind 'carbon' (carbon_sink:KIND) {said}" in refused.stderr, refused.stderr
    assert not (tmp_path / "out").exists() and ledger_runs(docs) == 0, "nothing ran"
