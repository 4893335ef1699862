"""A results table Shardwise made gains the nullable output columns a later run stores: a run with
``--json-schema`` after one without adds ``parsed``. A table Shardwise did not make is never altered: the
run is refused in one line saying so (issue 45, item 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import flow_runs, ledger_runs, one_line
from flow_data import execute, make_docs
from hf_builders import tiny_causal_lm

from shardwise.flows.cli import main

pytestmark = [pytest.mark.usefixtures("prefect_harness")]
pytest.importorskip("transformers")

SCHEMA = {
    "type": "object",
    "properties": {"label": {"enum": ["good", "bad"]}},
    "required": ["label"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"), context=4096)


def _run(url: str, lm: Path, *extra: str) -> list[str]:
    return [
        "run", "--source", url, "--table", "docs", "--model", str(lm), "--results-table", "answers",
        "--max-new-tokens", "30", "--chat", "off", "--precision", "fp32", *extra,
    ]  # fmt: skip


def _columns(url: str) -> list[str]:
    found = "select column_name from information_schema.columns where table_name = 'answers'"
    if url.startswith("sqlite"):
        found = "select name from pragma_table_info('answers')"
    return sorted(row[0] for row in execute(url, found))


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_table_shardwise_made_gains_the_column_a_json_schema_run_needs(
    db: str, request: pytest.FixtureRequest, lm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On PostgreSQL ``parsed`` is jsonb: the case the issue met."""
    url = str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url"))
    make_docs(url, 4, bad=False)
    assert main(_run(url, lm)) == 0, capsys.readouterr()
    assert "parsed" not in _columns(url)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    code = main(_run(url, lm, "--json-schema", str(schema)))
    out = capsys.readouterr().out
    assert code == 0 and "completed: 4 rows scored" in out, out
    parsed = execute(url, "select parsed from answers where parsed is not null")
    assert len(parsed) == 4 and all(
        set(p if isinstance(p, dict) else json.loads(p)) == {"label"} for (p,) in parsed
    )
    assert execute(url, "select count(*) from answers where parsed is null") == [(4,)], "the first run's"


def test_a_table_shardwise_did_not_make_is_never_altered(
    sqlite_url: str,
    lm: Path,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    make_docs(sqlite_url, 4, bad=False)
    assert main(_run(sqlite_url, lm)) == 0, capfd.readouterr()
    capfd.readouterr()
    runs = ledger_runs(sqlite_url)
    execute(sqlite_url, "delete from shardwise_tables")  # as a table the user made, or an older Shardwise
    before, flows = _columns(sqlite_url), flow_runs()
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    code = main(_run(sqlite_url, lm, "--json-schema", str(schema)))
    err = one_line(capfd)
    assert code == 2, err
    assert (
        "results table 'answers' already exists with a different layout: column 'parsed' (json) is missing"
        in err
    )
    assert "Shardwise has no record of making it (shardwise_tables), so never alters it;" in err, err
    assert _columns(sqlite_url) == before and ledger_runs(sqlite_url) == runs and flow_runs() == flows
