"""``--query-timeout`` end to end (issue 24): a flow parameter and an option of run, redrive and plan; a
runaway ``--where`` fails the planning in one line naming the limit, on PostgreSQL and on SQLite, and a
plan records the limit its reads ran under."""

from __future__ import annotations

import pytest
from cli_helpers import one_line
from flow_data import execute

from shardwise.flows.cli import main
from shardwise.flows.params import ScoreParams
from shardwise.pipeline.worker import open_spec_source
from shardwise.tasks.connections import resolve

HEAVY = "x" * 3000


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def heavy_docs(request: pytest.FixtureRequest) -> tuple[str, str]:
    """A docs table of 600 heavy rows, and a filter that takes seconds over them (MBs per row)."""
    url = str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))
    execute(url, "create table docs (id bigint primary key, text text)")
    execute(
        url, "insert into docs (id, text) values (:id, :text)", [{"id": k, "text": HEAVY} for k in range(600)]
    )
    costly = (
        "length(lpad(text, length(text) * 10000)) > 0"
        if request.param == "postgresql"
        else "length(replace(text, 'x', text)) > 0"
    )
    return url, costly


@pytest.mark.parametrize("command", ["plan", "run"])
@pytest.mark.usefixtures("prefect_harness")
def test_a_runaway_filter_fails_planning_in_one_line_naming_the_limit(
    heavy_docs: tuple[str, str], command: str, capfd: pytest.CaptureFixture[str]
) -> None:
    url, costly = heavy_docs
    argv = [command, "--source", url, "--table", "docs", "--model", "tiny", "--where", costly]
    code = main([*argv, "--query-timeout", "0.3"])
    err = one_line(capfd)
    assert code == 2, err
    assert "shardwise: error: planning " in err and "#" in err, err
    assert "was stopped by the query timeout: a query ran past 0.3 s (--query-timeout)" in err, err
    assert "raise --query-timeout SECONDS (0: no limit)" in err, err


def test_the_option_reaches_the_workers_source_and_defaults_to_300_s(sqlite_url: str) -> None:
    execute(sqlite_url, "create table docs (id integer primary key, text text)")
    params = ScoreParams.model_validate({"source": {"location": sqlite_url, "table": "docs"}})
    assert params.source.options.sql.query_timeout_s == 300 and params.to_spec().source.options == ()
    with open_spec_source(params.to_spec(), resolve) as source:
        assert source.params["query_timeout_s"] == 300
    source = {"location": sqlite_url, "table": "docs", "options": {"sql": {"query_timeout_s": 12.5}}}
    spec = ScoreParams.model_validate({"source": source, "model": {"name": "tiny"}}).to_spec()
    with open_spec_source(spec, resolve) as source:
        assert source.params["query_timeout_s"] == 12.5


def test_a_negative_timeout_is_one_line_exit_2(sqlite_url: str, capfd: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--source", sqlite_url, "--table", "docs", "--query-timeout", "-1"])
    err = one_line(capfd)
    assert code == 2 and "--query-timeout -1.0: Input should be greater than or equal to 0" in err, err
