"""A mistake is one line and an exit code, before anything runs; a failure inside a run is one line too.

Exit codes: 0 done, 1 the run failed, 2 bad input (nothing ran), 3 a service
could not be reached. Output is captured at the file descriptors, so Prefect's
own console log counts as well.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_helpers import free_port, ledger_runs, one_line
from flow_data import execute, make_docs

from shardwise.flows.cli import main

BAD_INPUTS = [
    (
        ["--where", "nosuch > 1"],
        "where filter 'nosuch > 1' does not run",
        "fix --where (columns are: id, text)",
    ),
    (["--results-table", "bad name;"], "results table name 'bad name;' is not an identifier", "letters"),
    (["--resume", "no-such-run"], "run 'no-such-run' is not in the shardwise_runs table", "SELECT run_id"),
    (["--model", ""], "--model '': is empty", "leave the option out"),
    (["--model", "  "], "--model '  ': is empty", "leave the option out"),
    (["--text-column", " "], "--text-column ' ': is empty", "give a value"),
    (["--model", "gpt-9"], "model 'gpt-9' is not in the catalogue", "models: minilm, mobilenet-v2, tiny"),
    (["--shards", "0"], "--shards 0: Input should be greater than or equal to 1", ""),
    (["--shards", "2", "--rows-per-shard", "5"], "give shards (2) or rows_per_shard (5), not both", ""),
    (["--key", "nokey"], "key column 'nokey' not in table 'docs'", "columns are: id, text"),
    (["--text-column", "body"], "text column 'body' not in table 'docs'", "columns are: id, text"),
    (["--text-pair-column", "qq"], "text pair column 'qq' not in table 'docs'", "columns are: id, text"),
    (["--text-pair-column", "text"], "text_pair_column 'text' is also the text column", "second text"),
    (["--table", "dosc"], "'dosc'", "docs"),
    (["--device", "gpu"], "--device 'gpu': is not a device", "use auto, cpu, cuda or cuda:N"),
]


@pytest.mark.parametrize(("extra", "message", "fix"), BAD_INPUTS, ids=[" ".join(c[0]) for c in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2_and_no_run(
    docs: str, extra: list[str], message: str, fix: str, capfd: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "--source", docs, "--table", "docs", "--model", "tiny", *extra]
    code = main(argv)
    err = one_line(capfd)
    assert code == 2, err
    assert err.startswith("shardwise: error: ") and message in err and fix in err, err
    assert ledger_runs(docs) == 0


CUDA_ABSENT = [] if torch.cuda.is_available() else [(["--device", "cuda"], "device 'cuda' needs CUDA", "")]
"""``--device cuda`` is bad input only on a host without CUDA."""


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize(
    ("extra", "message", "fix"),
    [*BAD_INPUTS, *CUDA_ABSENT],
    ids=[" ".join(c[0]) for c in [*BAD_INPUTS, *CUDA_ABSENT]],
)
def test_bad_input_in_a_flow_run_started_elsewhere_records_nothing(
    docs: str, extra: list[str], message: str, fix: str
) -> None:
    """Issue 45 item 9: a flow run from the UI, a trigger or a deployment has no command line to check its
    parameters first; it checks them itself, and fails before anything is recorded. Parameters the form
    itself refuses never reach a flow run."""
    from shardwise.flows.cli import _parser
    from shardwise.flows.cli_options import score_params
    from shardwise.flows.score import score

    argv = ["run", "--source", docs, "--table", "docs", "--model", "tiny", *extra]
    try:
        params = score_params(_parser().parse_args(argv))
    except ValueError as exc:  # pydantic's ValidationError and ConfigError: the form's own refusal
        assert message.split(": ", 1)[-1].split("'")[0] in str(exc), exc
        return
    state = score(params, return_state=True)
    assert state.is_failed() and message in str(state.message), state.message
    assert ledger_runs(docs) == 0


PLUGINS = Path(__file__).resolve().parent.parent / "models"
"""Where ``plugin_faults`` lives: model plug-ins with one fault each."""
BAD_PLUGINS = [
    (
        "nosuch.module:spec",
        "model 'nosuch.module:spec': no module named 'nosuch'",
        "PYTHONPATH or pip install",
    ),
    ("json:nosuch", "module 'json' has no attribute 'nosuch'", "its public names are: JSONDecodeError"),
    ("os:sep", "model 'os:sep' is '/' (type str), not a ModelSpec", "point at one"),
    ("json:dumps", "(type function), not a ModelSpec", "is never called"),
    ("plugin_faults:timestamped", "describe() gave version 'run-", "content hash of its weights"),
    ("plugin_faults:no_outputs", "outputs () is not a non-empty tuple of OutputColumn", "declare each"),
    ("plugin_faults:taken_column", "output column name 'model_version' is invalid or taken", "not one of"),
    ("plugin_faults:no_length", "max_length 0 is not a positive whole number", "the longest input"),
    ("plugin_faults:failing", "describe() raised FileNotFoundError: weights.bin", "fix the plug-in"),
]


@pytest.mark.parametrize(("model", "message", "fix"), BAD_PLUGINS, ids=[c[0] for c in BAD_PLUGINS])
def test_a_bad_plugin_is_one_line_exit_2_and_no_run(
    docs: str,
    model: str,
    message: str,
    fix: str,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.syspath_prepend(str(PLUGINS))
    code = main(["run", "--source", docs, "--table", "docs", "--model", model])
    err = one_line(capfd)
    assert code == 2, err
    assert err.startswith("shardwise: error: ") and message in err and fix in err, err
    assert ledger_runs(docs) == 0


def test_pairs_for_a_model_without_them_are_refused_before_the_run(
    docs: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    execute(docs, "alter table docs add column question text")
    monkeypatch.syspath_prepend(str(PLUGINS))
    pairs = ["--text-column", "question", "--text-pair-column", "text"]
    code = main(["run", "--source", docs, "--table", "docs", "--model", "plugin_faults:no_pairs", *pairs])
    err = one_line(capfd)
    assert code == 2 and "model 'faulty' does not take text pairs" in err and "drop --text-pair-column" in err
    assert ledger_runs(docs) == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has CUDA: --device cuda is valid here")
def test_cuda_on_a_host_without_it_is_refused_before_the_run(
    docs: str, capfd: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--source", docs, "--table", "docs", "--model", "tiny", "--device", "cuda"])
    err = one_line(capfd)
    assert code == 2 and "device 'cuda' needs CUDA" in err and "use --device cpu" in err
    assert ledger_runs(docs) == 0


@pytest.mark.parametrize("results", [False, True])
def test_a_missing_parquet_path_is_named_whether_or_not_results_are_given(
    docs: str, tmp_path: Path, results: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-folder"
    code = main(
        ["run", "--source", str(missing), "--model", "tiny", *(["--results", docs] if results else [])]
    )
    err = one_line(capfd)
    assert code == 2 and f"Parquet location '{missing}' is not a file, folder or glob that exists" in err
    assert ledger_runs(docs) == 0


def test_a_key_in_two_parquet_files_is_one_line_exit_2_and_no_run(
    docs: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    for name, keys in (("a.parquet", [1, 2, 3]), ("b.parquet", [3, 4])):
        pq.write_table(pa.table({"id": keys, "text": [f"row {k}" for k in keys]}), tmp_path / name)
    code = main(["run", "--source", str(tmp_path), "--results", docs, "--model", "tiny"])
    err = one_line(capfd)
    assert code == 2, err
    assert "key column 'id' of the Parquet dataset is not unique: key 3 appears on more than one row" in err
    assert "in a.parquet, b.parquet;" in err and "rewrite the files so that each key appears once" in err
    assert ledger_runs(docs) == 0


@pytest.mark.s3
def test_s3_without_credentials_is_one_line_before_the_run(
    docs: str, s3_endpoint, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    s3_endpoint.client().create_bucket(Bucket="creds")
    s3_endpoint.client().put_object(Bucket="creds", Key="in/part-0.parquet", Body=b"x")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint.url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", s3_endpoint.region)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code = main(["run", "--source", "s3://creds/in/", "--results", docs, "--model", "tiny"])
    err = one_line(capfd)
    assert code == 2 and "Unable to locate credentials" in err and "AWS_ACCESS_KEY_ID" in err, err
    assert ledger_runs(docs) == 0


def test_watch_options_become_one_watch_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    import shardwise.flows.watch
    from shardwise.watch import WatchSpec

    calls: list[tuple[object, ...]] = []
    monkeypatch.setattr(shardwise.flows.watch, "watch", lambda spec, **kw: calls.append((spec, kw)))
    argv = ["watch", "--source", "env:DOCS_DB", "--table", "docs", "--name", "docs", "--key", "doc_id"]
    argv += ["--updated-at", "changed", "--mode", "poll", "--interval", "5", "--debounce", "0.5"]
    assert main([*argv, "--results", "env:RESULTS_DB", "--install-trigger"]) == 0
    spec = WatchSpec(
        "env:DOCS_DB", "docs", "docs", "doc_id", "changed", mode="poll", interval_s=5, debounce_s=0.5
    )
    assert calls == [(spec, {"results": "env:RESULTS_DB", "install": True})]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--name", "Docs!"], "watcher name must be 1-63 characters"),
        (["--name", "docs", "--interval", "0"], "interval_s must be a positive number of seconds; got 0.0"),
        (["--name", "docs", "--debounce", "-1"], "debounce_s must be a number of seconds >= 0; got -1.0"),
    ],
)
def test_a_bad_watch_option_is_one_line_exit_2_before_watching(
    docs: str, extra: list[str], message: str, capfd: pytest.CaptureFixture[str]
) -> None:
    code = main(["watch", "--source", docs, "--table", "docs", *extra])
    err = one_line(capfd)
    assert code == 2 and message in err, err


def test_an_unreachable_database_exits_3(capfd: pytest.CaptureFixture[str]) -> None:
    url = f"postgresql+psycopg://root@127.0.0.1:{free_port()}/test"
    code = main(["run", "--source", url, "--table", "docs", "--model", "tiny"])
    err = one_line(capfd)
    assert code == 3 and "Connection refused" in err, err


def test_an_unreachable_prefect_api_exits_3(docs: str, capfd: pytest.CaptureFixture[str]) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    dead = f"http://127.0.0.1:{free_port()}/api"
    with temporary_settings({PREFECT_API_URL: dead}):
        code = main(["run", "--source", docs, "--table", "docs", "--model", "tiny"])
    err = one_line(capfd)
    assert code == 3 and f"the Prefect API at {dead} (PREFECT_API_URL) did not answer" in err, err
    assert "prefect server start" in err and ledger_runs(docs) == 0


@pytest.mark.postgres
@pytest.mark.usefixtures("prefect_harness")
def test_an_error_inside_the_run_is_one_line_and_the_traceback_goes_to_verbose(
    pg_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """A filter that parses but fails on some row passes the checks and fails while planning."""
    make_docs(pg_url, 20)
    argv = ["run", "--source", pg_url, "--table", "docs", "--model", "tiny", "--where", "1 / (id - 5) > 0"]
    assert main(argv) == 2
    err = one_line(capfd)
    assert err.startswith("shardwise: error: ") and "division by zero" in err, err

    assert main([*argv, "--verbose"]) == 2
    assert "Traceback" in capfd.readouterr().err


@pytest.mark.usefixtures("prefect_harness")
def test_redrive_with_nothing_changed_says_so_and_suggests_force(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 10)  # with three bad rows
    common = ["--source", sqlite_url, "--table", "docs", "--model", "tiny", "--progress", "none"]
    assert main(["run", *common]) == 0
    run_id = execute(sqlite_url, "select run_id from shardwise_runs")[0][0]
    capsys.readouterr()
    assert main(["redrive", *common, "--run", run_id]) == 0
    out = capsys.readouterr().out
    assert f"nothing to redrive: none of the dead-lettered inputs of run {run_id} changed" in out, out
    assert "add --force" in out and ledger_runs(sqlite_url) == 1


def test_the_console_script_keeps_a_bad_input_to_one_line(docs: str) -> None:
    argv = ["run", "--source", docs, "--table", "docs", "--model", "tiny", "--where", "nosuch = 1"]
    proc = subprocess.run(
        [sys.executable, "-m", "shardwise.flows.cli", *argv], capture_output=True, text=True
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert ledger_runs(docs) == 0


def test_the_console_script_keeps_a_bad_plugin_to_one_line(docs: str) -> None:
    argv = ["run", "--source", docs, "--table", "docs", "--model", "plugin_faults:timestamped"]
    env = {**os.environ, "PYTHONPATH": str(PLUGINS)}
    proc = subprocess.run(
        [sys.executable, "-m", "shardwise.flows.cli", *argv], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "not a timestamp" in proc.stderr, proc.stderr
    assert ledger_runs(docs) == 0
