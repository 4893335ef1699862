"""``--table schema.name`` on PostgreSQL (issue 24): read from that schema, results and the ledger in the
database's default schema, and ``--only-new`` anti-joins them from there. (A SQLite source refuses it:
tests/flows/test_input_refusals.py.)"""

from __future__ import annotations

import pytest
from cli_helpers import one_line
from flow_data import execute, make_docs

from shardwise.flows.cli import main

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("prefect_harness")]

TABLES = [
    ("app", "docs", "app.docs"),
    ("Sales.EU", "Docs", '"Sales.EU"."Docs"'),  # a dot and capitals: only quoting keeps them apart
]


@pytest.mark.parametrize(("schema", "table", "given"), TABLES, ids=[t[2] for t in TABLES])
def test_a_schema_qualified_table_is_scored_and_only_new_finds_its_results(
    pg_url: str, schema: str, table: str, given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    quoted = f'"{schema}"."{table}"'
    execute(pg_url, f'create schema "{schema}"')
    make_docs(pg_url, 30, table=quoted)
    make_docs(pg_url, 5, bad=False, table="public.docs")  # a decoy of the same name in the default schema
    argv = ["--source", pg_url, "--table", given, "--model", "tiny", "--shards", "2"]

    assert main(["run", *argv]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "completed: 30 rows scored" in out and "3 dead letters" in out, out
    assert execute(pg_url, "select count(*) from public.shardwise_results") == [(30,)]
    assert execute(pg_url, "select count(*) from public.shardwise_errors") == [(3,)]
    (identity,) = execute(pg_url, "select source_identity from public.shardwise_runs")[0]
    assert identity.endswith(f"#{schema}.{table}"), identity

    assert main(["plan", *argv]) == 0
    assert "--only-new would skip 30 rows" in capsys.readouterr().out
    execute(pg_url, f"update {quoted} set text = 'changed since' where id = 7")
    assert main(["run", *argv, "--only-new"]) == 0
    out = capsys.readouterr().out
    assert "completed: 1 row scored (0 new, 1 updated" in out and "3 dead letters" in out, out


BAD_NAMES = [
    ("app.", "has an empty name"),
    ("a.b.c", "has 3 parts"),
    ('"app.docs', "has an unclosed '\"'"),
    ('app"x.docs', "has a '\"' inside a name"),
]


@pytest.mark.parametrize(("given", "why"), BAD_NAMES, ids=[b[0] for b in BAD_NAMES])
def test_a_table_name_that_is_neither_form_is_refused(
    pg_url: str, given: str, why: str, capfd: pytest.CaptureFixture[str]
) -> None:
    make_docs(pg_url, 3)
    code = main(["run", "--source", pg_url, "--table", given, "--model", "tiny"])
    err = one_line(capfd)
    assert code == 2, err
    assert f"table {given!r} is not NAME or SCHEMA.NAME: it {why}" in err, err
