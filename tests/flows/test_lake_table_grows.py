"""A lake table Shardwise made gains the nullable output columns a later run stores: a run with
``--json-schema`` after one without adds ``parsed``. A table Shardwise did not make is never altered: the
run is refused in one line saying so (issue 45, item 3; the SQL sink's case is test_results_table_grows)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from cli_helpers import flow_runs, ledger_runs, one_line
from flow_data import make_docs
from hf_builders import tiny_causal_lm

from shardwise.flows.cli import main
from shardwise.sinks.iceberg.catalog import table_name

pytestmark = [pytest.mark.usefixtures("prefect_harness")]
pytest.importorskip("transformers")
deltalake = pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")
KINDS = ["delta", "iceberg"]
"""The kinds whose tables a user can make too; every Parquet table (with its ``_shardwise_schema.json``)
is Shardwise's."""

SCHEMA = {
    "type": "object",
    "properties": {"label": {"enum": ["good", "bad"]}},
    "required": ["label"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"), context=4096)


def _run(url: str, lm: Path, lake: Path, kind: str, table: str, *extra: str) -> list[str]:
    return [
        "run", "--source", url, "--table", "docs", "--model", str(lm), "--results", str(lake),
        "--results-format", kind, "--results-table", table,
        "--max-new-tokens", "30", "--chat", "off", "--precision", "fp32", *extra,
    ]  # fmt: skip


def _schema(tmp_path: Path) -> str:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    return str(path)


def _catalog(lake: Path) -> Any:
    from shardwise.sinks.iceberg.catalog import catalog_url, open_catalog

    return open_catalog(catalog_url(None, str(lake)), str(lake), None, create=False)


def _read(kind: str, lake: Path, table: str) -> pa.Table:
    """The table as the kind's own reader sees it."""
    if kind == "delta":
        return deltalake.DeltaTable(str(lake / table)).to_pyarrow_table()
    if kind == "parquet":  # files from before the table grew lack the column: read all with their union
        files = sorted((lake / table / "data").glob("*.parquet"))
        union = pa.unify_schemas([pq.read_schema(f) for f in files])
        return ds.dataset([str(f) for f in files], schema=union, format="parquet").to_table()
    return _catalog(lake).load_table(table_name(table)).scan().to_arrow()


def _copy_as_users(kind: str, lake: Path, made: pa.Table, table: str) -> None:
    """A table of the same rows that the user made: without Shardwise's marker."""
    if kind == "delta":
        deltalake.write_deltalake(str(lake / table), made)
        return
    _catalog(lake).create_table(table_name(table), schema=made.schema).append(made)


def _state(kind: str, lake: Path, table: str) -> tuple[object, list[str]]:
    """The table's version and columns."""
    if kind == "delta":
        found = deltalake.DeltaTable(str(lake / table))
        return found.version(), found.schema().to_arrow().names
    loaded = _catalog(lake).load_table(table_name(table))
    return loaded.metadata.current_snapshot_id, [f.name for f in loaded.schema().fields]


@pytest.mark.parametrize("kind", [*KINDS, "parquet"])
def test_a_lake_table_shardwise_made_gains_the_column_a_json_schema_run_needs(
    kind: str, sqlite_url: str, lm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 4, bad=False)
    lake = tmp_path / "lake"
    assert main(_run(sqlite_url, lm, lake, kind, "answers")) == 0, capsys.readouterr()
    assert "parsed" not in _read(kind, lake, "answers").column_names
    code = main(_run(sqlite_url, lm, lake, kind, "answers", "--json-schema", _schema(tmp_path)))
    out = capsys.readouterr().out
    assert code == 0 and "completed: 4 rows scored" in out, out
    parsed = _read(kind, lake, "answers").column("parsed")
    found = [json.loads(p) for p in parsed.to_pylist() if p is not None]
    assert len(found) == 4 and all(set(p) == {"label"} for p in found)
    assert parsed.null_count == 4, "the first run's rows, under their own model version"


@pytest.mark.parametrize("kind", KINDS)
def test_a_lake_table_shardwise_did_not_make_is_never_altered(
    kind: str, sqlite_url: str, lm: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 4, bad=False)
    lake = tmp_path / "lake"
    assert main(_run(sqlite_url, lm, lake, kind, "answers")) == 0, capfd.readouterr()
    capfd.readouterr()
    _copy_as_users(kind, lake, _read(kind, lake, "answers"), "mine")
    before, runs, flows = _state(kind, lake, "mine"), ledger_runs(sqlite_url), flow_runs()
    code = main(_run(sqlite_url, lm, lake, kind, "mine", "--json-schema", _schema(tmp_path)))
    err = one_line(capfd)
    assert code == 2, err
    assert "table" in err and "already exists with a different layout: column 'parsed'" in err, err
    assert "Shardwise did not make it (it lacks Shardwise's marker), so never alters it;" in err, err
    assert _state(kind, lake, "mine") == before
    assert ledger_runs(sqlite_url) == runs and flow_runs() == flows
