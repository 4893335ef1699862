"""The ``shardwise`` command line: run, plan, and clear errors for bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flow_data import execute, make_docs

from shardwise.flows.cli import main


@pytest.mark.usefixtures("prefect_harness")
def test_run_then_plan_reports_what_only_new_would_skip(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 120)
    code = main(["run", "--source", sqlite_url, "--table", "docs", "--model", "tiny", "--shards", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "completed: 120 rows scored" in out and "3 dead letters" in out
    run_id = execute(sqlite_url, "select run_id from shardwise_runs")[0][0]
    assert f"run {run_id}" in out

    execute(sqlite_url, "insert into docs (id, text) values (5000, 'a brand new row')")
    assert main(["plan", "--source", sqlite_url, "--table", "docs", "--model", "tiny", "--shards", "2"]) == 0
    out = capsys.readouterr().out
    assert "2 shards, 124 rows to score" in out
    assert "prompt tokens: " in out and "estimated tokens" not in out, "one token figure"
    assert "--only-new would skip 120 rows" in out


@pytest.mark.usefixtures("prefect_harness")
def test_a_run_counts_rows_with_a_null_key_as_skipped(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    execute(sqlite_url, "create table docs (id bigint, text text)")
    rows = [{"k": k, "t": f"paragraph {k} about shards"} for k in range(6)] + [{"k": None, "t": "no key"}]
    execute(sqlite_url, "insert into docs values (:k, :t)", rows)
    code = main(["run", "--source", sqlite_url, "--table", "docs", "--model", "tiny"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert (
        "6 rows scored (6 new, 0 updated, 0 unchanged), 0 dead letters, 1 skipped (1 with a NULL key), "
        in out
    )
    assert main(["plan", "--source", sqlite_url, "--table", "docs", "--model", "tiny"]) == 0
    assert "1 row with a NULL key is skipped: not scored" in capsys.readouterr().out


def test_unknown_table_is_a_clear_error_before_anything_runs(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 5)
    code = main(["run", "--source", sqlite_url, "--table", "dosc", "--model", "tiny"])
    err = capsys.readouterr().err
    assert code == 2
    assert "'dosc'" in err and "docs" in err


def test_unknown_model_lists_the_catalogue(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    make_docs(sqlite_url, 5)
    code = main(["run", "--source", sqlite_url, "--table", "docs", "--model", "gpt-9"])
    assert code == 2 and "known models: minilm, mobilenet-v2, tiny" in capsys.readouterr().err


def test_password_never_reaches_the_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "plan",
            "--source",
            "postgresql+psycopg://app:hunter2@127.0.0.1:1/nowhere",
            "--table",
            "t",
            "--model",
            "tiny",
        ]
    )
    err = capsys.readouterr().err
    assert code == 3 and "hunter2" not in err  # nothing listens on port 1: a service unreachable


@pytest.mark.postgres
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize(
    ("password", "written"),
    [
        ("cli-secret-pw", "cli-secret-pw"),
        # Every character outside RFC 3986's userinfo set is percent-encoded: raw, it is refused
        # (tests/flows/test_input_refusals.py), since parsers disagree on where the password ends.
        ("Pa/ss X-secret", "Pa%2Fss%20X-secret"),
        ("pä§wörd/ 1-secret", "p%C3%A4%C2%A7w%C3%B6rd%2F%201-secret"),
        ("p@ss:w%rd-secret", "p%40ss%3Aw%25rd-secret"),
    ],
)
def test_a_password_in_a_cli_url_is_never_stored_shown_or_logged(
    pg_url: str,
    password: str,
    written: str,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Trust auth takes any password, so each one really reaches the server, through the URL parser."""
    import asyncio

    from prefect import get_client

    make_docs(pg_url, 30)
    secret_url = pg_url.replace("root@", f"root:{written}@")
    argv = ["run", "--source", secret_url, "--table", "docs", "--model", "tiny", "--shards", "1"]
    assert main([*argv, "--verbose"]) == 0

    async def parameters() -> list[dict]:
        async with get_client() as client:
            return [run.parameters for run in await client.read_flow_runs()]

    stored = repr(asyncio.run(parameters()))
    assert "held:source" in stored
    ledger = repr(execute(pg_url, "select parameters from shardwise_runs"))
    seen = {"prefect": stored, "ledger": ledger, "logs": caplog.text, "terminal": str(capfd.readouterr())}
    for secret in {password, written, password[3:], written[3:]}:  # a tail is what a pattern would miss
        leaked = [where for where, text in seen.items() if secret in text]
        assert not leaked, f"{secret!r} found in {leaked}"


@pytest.mark.postgres
@pytest.mark.usefixtures("prefect_harness")
def test_a_password_in_a_cli_ledger_url_is_held_not_stored_in_prefect(
    sqlite_url: str, pg_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """--ledger travels as held:ledger like --source and --results; it was stored in the flow run's
    parameters, password and all. Trust auth takes any password, so the ledger is really used."""
    import asyncio

    from prefect import get_client

    make_docs(sqlite_url, 10)
    ledger = pg_url.replace("root@", "root:LedgerCanary42@")
    argv = ["run", "--source", sqlite_url, "--table", "docs", "--model", "tiny", "--ledger", ledger]
    assert main(argv) == 0, capfd.readouterr().err

    async def parameters() -> str:
        async with get_client() as client:
            return repr([run.parameters for run in await client.read_flow_runs()])

    stored = asyncio.run(parameters())
    assert "held:ledger" in stored and "LedgerCanary42" not in stored, stored
    assert "LedgerCanary42" not in str(capfd.readouterr())
    assert len(execute(pg_url, "select run_id from shardwise_runs")) == 1  # the run went to that ledger


@pytest.mark.usefixtures("prefect_harness")
def test_redrive_scores_only_fixed_dead_letters(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    make_docs(sqlite_url, 40)  # with three bad rows
    common = ["--source", sqlite_url, "--table", "docs", "--model", "tiny"]
    assert main(["run", *common]) == 0
    run_id = execute(sqlite_url, "select run_id from shardwise_runs")[0][0]
    execute(sqlite_url, "update docs set text = 'fixed at last' where id in (900001, 900002)")
    capsys.readouterr()
    assert main(["redrive", *common, "--run", run_id]) == 0
    assert "2 rows scored (2 new" in capsys.readouterr().out
    assert execute(sqlite_url, "select count(*) from shardwise_results") == [(42,)]
    assert main(["redrive", *common, "--run", run_id, "--force"]) == 0
    out = capsys.readouterr().out
    assert "1 dead letter," in out, out


@pytest.mark.usefixtures("prefect_harness")
def test_a_relative_sqlite_url_redrives_a_run_recorded_absolute_and_only_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    absolute = f"sqlite:///{tmp_path / 'work' / 'shardwise.db'}"
    (tmp_path / "work").mkdir()
    make_docs(absolute, 20)  # with three bad rows: 900001 to 900003
    options = ["--table", "docs", "--model", "tiny", "--progress", "none"]
    assert main(["run", "--source", absolute, *options]) == 0
    run_id = execute(absolute, "select run_id from shardwise_runs")[0][0]
    execute(absolute, "update docs set text = 'fixed at last' where id = 900001")
    execute(absolute, "update docs set text = ' ' where id = 900002")  # changed, and still bad
    monkeypatch.chdir(tmp_path)
    relative = ["redrive", "--source", "sqlite:///work/shardwise.db", *options, "--run", run_id]
    capsys.readouterr()

    assert main(relative) == 0  # the same database, named relative to the working directory
    out = capsys.readouterr().out
    assert "1 row scored (1 new" in out and "1 dead letter," in out, out
    assert main(relative) == 0  # again: both were redriven, and neither input changed since
    out = capsys.readouterr().out
    assert "nothing to redrive" in out and "1 already scored by an earlier redrive" in out, out
    execute(absolute, "update docs set text = 'fixed later' where id in (900002, 900003)")
    assert main(relative) == 0  # only what changed since the last redrive
    assert "2 rows scored (2 new" in capsys.readouterr().out
    assert execute(absolute, "select count(*) from shardwise_results") == [(23,)]  # 20 and the 3 fixed


SECRET_SOURCE = "postgresql+psycopg://app:pw-in-url@127.0.0.1:9/prod"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--runner", "dask", "--address", "tcp://127.0.0.1:9"], "must not travel to workers on other hosts"),
        (["--runner", "thread", "--address", "tcp://127.0.0.1:9"], "only the dask and ray runners use"),
    ],
)
def test_fan_out_mistakes_are_one_line_before_anything_runs(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--source", SECRET_SOURCE, "--table", "docs", "--model", "tiny", *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "pw-in-url" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_a_device_that_does_not_exist_is_refused_before_anything_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "--source", "sqlite:///x.db", "--table", "docs", "--device", "gpu"]) == 2
    assert "--device 'gpu': is not a device; use auto, cpu, cuda or cuda:N" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--precision", "fp8"], "argument --precision: invalid choice: 'fp8'"),
        (["--min-agreement", "1.5"], "--min-agreement 1.5: Input should be less than or equal to 1"),
        (["--min-agreement", "high"], "argument --min-agreement: 'high' is not a number"),
    ],
)
def test_a_bad_precision_is_one_line(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(["run", "--source", "sqlite:///x.db", "--table", "docs", *extra])
    except SystemExit as exc:  # the parser's own checks (choices, types) exit at once
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and message in err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("argv", "code"), [(["--help"], 0), (["run", "--source", "x.db", "--precision", "fp8"], 2)]
)
def test_the_console_script_keeps_exit_codes_through_its_fast_exit(argv: list[str], code: int) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "shardwise.flows.cli", *argv], capture_output=True, text=True
    )
    assert proc.returncode == code, proc.stderr


def _subcommands() -> dict:
    import argparse

    from shardwise.flows.cli import _parser

    parser = _parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_flow_parameter_is_an_option_with_help_and_its_default() -> None:
    from pydantic import BaseModel

    from shardwise.flows.cli_options import flag_for
    from shardwise.flows.params import ScoreParams

    commands = _subcommands()
    flags = {
        flag: action
        for name in ("run", "redrive", "plan")
        for action in commands[name]._actions
        for flag in action.option_strings
    }
    # set by `plan`, by triggers, or by deployments
    internal = {"run.dry_run", "triggered_by", "source.source_name"}

    def leaves(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
        """Every field of every section (the sink kinds' sections too), by its dotted path."""
        found = []
        for n, f in model.model_fields.items():
            nested = isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)
            found += leaves(f.annotation, f"{prefix}{n}.") if nested else [(f"{prefix}{n}", f)]
        return found

    fields = [(n, f) for n, f in leaves(ScoreParams) if n not in internal]
    for name, field in fields:
        action = flags[flag_for(name)]
        assert action.dest == name  # the option's dest is the field's path: the flow's parameter nests by it
        assert action.help and field.description and field.description in action.help.replace("%%", "%")
        if field.default not in (None, False) and not field.is_required():
            shown = "none" if field.default == [] else field.default  # a repeatable option, not given
            assert f"(default: {shown})" in action.help, name


@pytest.mark.parametrize("name", ["run", "redrive", "plan", "watch", "serve", "deploy", "demo"])
def test_each_subcommand_help_teaches(name: str) -> None:
    parser = _subcommands()[name]
    text = parser.format_help()
    assert "example:\n  shardwise " in text or "example:\n  PREFECT_API_URL" in text, text
    assert "exit codes: 0 " in text and "2 bad input" in text and "3 a service could not be reached" in text
    footer = text[text.index("exit codes: ") :]
    if name in ("run", "redrive"):
        assert "1 the run failed" in footer and "4 the run was taken over by another process" in footer
        assert "the line names the run to --resume" in footer
    else:  # nothing of a run to resume: serve, watch and deploy stop; plan reads; demo starts afresh
        assert "resume" not in footer.replace("serve again to resume it", ""), footer
    undocumented = [a.dest for a in parser._actions if not a.help]
    assert not undocumented, undocumented
    if name in ("run", "redrive", "plan", "watch"):
        source = next(a for a in parser._actions if "--source" in a.option_strings)
        assert "env:NAME" in source.help and "secret:NAME" in source.help


def test_a_usage_mistake_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", "--table", "docs"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "the following arguments are required: --source; see shardwise run --help" in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["run", "--source", "x.db", "--text-colum", "body"],
            "shardwise run: error: --text-colum is not an option of shardwise run (options are never "
            "abbreviated); the closest is --text-column; see shardwise run --help",
        ),
        (
            ["plan", "--source", "x.db", "--txt-column=body"],
            "shardwise plan: error: --txt-column is not an option of shardwise plan; the closest is "
            "--text-column; see shardwise plan --help",
        ),
        (
            ["runs", "--limt", "3"],
            "shardwise runs: error: --limt is not an option of shardwise runs; the closest is --limit; see "
            "shardwise runs --help",
        ),
        (
            ["run", "--source", "x.db", "--frobnicate"],
            "shardwise run: error: --frobnicate is not an option of shardwise run; see shardwise run --help",
        ),
    ],
)
def test_an_unknown_or_abbreviated_option_names_the_closest_and_the_command_s_help(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 45: an abbreviation was taken silently, and an unknown option pointed at shardwise --help."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.strip() == said, err


@pytest.mark.usefixtures("prefect_harness")
def test_text_pairs_from_the_command_line(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    make_docs(sqlite_url, 30)
    execute(sqlite_url, "alter table docs add column question text")
    execute(sqlite_url, "update docs set question = 'which module is this from?' where id < 20")
    pair = ["--text-column", "question", "--text-pair-column", "text"]
    code = main(["run", "--source", sqlite_url, "--table", "docs", "--model", "tiny", *pair])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "20 rows scored" in out and "13 dead letters" in out, "10 null questions and the 3 bad texts"
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "--text-pair-column COLUMN" in capsys.readouterr().out


@pytest.mark.usefixtures("prefect_harness")
def test_int8_below_the_guard_is_refused_in_one_line_and_writes_nothing(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 20)
    argv = ["run", "--source", sqlite_url, "--table", "docs", "--model", "tiny", "--device", "cpu"]
    code = main([*argv, "--precision", "int8", "--min-agreement", "1.0"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "model 'tiny' in int8 agrees with float32 to 0.99" in err
    assert "below the minimum 1.0; use --precision fp32, bf16 or auto" in err
    tables = {row[0] for row in execute(sqlite_url, "select name from sqlite_master where type = 'table'")}
    assert "scores" not in tables and not (
        "shardwise_runs" in tables and execute(sqlite_url, "select count(*) from shardwise_runs")[0][0]
    ), "a refused run writes no result and no run"
