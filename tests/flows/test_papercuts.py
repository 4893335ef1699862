"""Operator papercuts (issue 20, part 3): each mistake is refused in one line with exit 2 before anything
runs (no run in the ledger, no flow run), and the command line keeps its exit codes, stops cleanly and says
one thing once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import flow_runs, free_port, ledger_runs, one_line
from flow_data import execute, parquet_bytes

from shardwise.flows.cli import main

# 1. Checked in preflight: a results table of another layout, fp16 on a CPU, an unreadable Parquet file.


def _refused(argv: list[str], ledger: str, capfd: pytest.CaptureFixture[str]) -> str:
    """Run ``argv``; it must exit 2 with one line, no run in ``ledger`` and no flow run."""
    before = flow_runs()
    code = main(argv)
    err = one_line(capfd)
    assert code == 2, err
    assert err.startswith("shardwise: error: "), err
    assert ledger_runs(ledger) == 0 and flow_runs() == before
    return err


@pytest.mark.usefixtures("prefect_harness")
def test_a_results_table_of_another_layout_is_refused_before_the_run(
    docs: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    execute(docs, "create table scores (id integer primary key, note text)")
    monkeypatch.setenv("SW_PAPERCUT_DOCS", docs)
    argv = ["run", "--source", "env:SW_PAPERCUT_DOCS", "--table", "docs", "--model", "tiny"]
    err = _refused([*argv, "--results-table", "scores"], docs, capfd)
    assert "results table 'scores' already exists with a different layout" in err, err
    assert "column 'source_key' (int) is missing" in err and "choose another --results-table" in err, err
    assert docs.removeprefix("sqlite:///") not in err, "the resolved URL is never shown"


@pytest.mark.usefixtures("prefect_harness")
def test_fp16_on_a_cpu_is_refused_before_the_run(docs: str, capfd: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--source", docs, "--table", "docs", "--model", "tiny", "--device", "cpu"]
    err = _refused([*argv, "--precision", "fp16"], docs, capfd)
    assert "precision fp16 is not computed natively on CPUs" in err, err
    assert "--precision fp32 or bf16" in err and "--device cuda" in err, err


def _corrupt(good: bytes) -> dict[str, bytes]:
    return {"random bytes": os.urandom(4096), "truncated": good[: len(good) * 2 // 3]}


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("fault", ["random bytes", "truncated"])
def test_an_unreadable_parquet_file_is_refused_before_the_run(
    docs: str, fault: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    good = parquet_bytes(list(range(50)), [f"text {i}" for i in range(50)])
    (folder / "part-0.parquet").write_bytes(good)
    (folder / "part.parquet").write_bytes(_corrupt(good)[fault])
    monkeypatch.setenv("SW_PAPERCUT_PARQUET", str(folder))
    argv = ["run", "--source", "env:SW_PAPERCUT_PARQUET", "--results", docs, "--model", "tiny"]
    err = _refused(argv, docs, capfd)
    assert "Parquet object 'part.parquet' is not a readable Parquet file" in err, err
    assert "remove it from the location" in err and str(folder) not in err, err


# 2. -v changes what is printed, never the exit code.


@pytest.mark.parametrize("verbose", [[], ["-v"]], ids=["quiet", "verbose"])
def test_a_bad_input_exits_2_with_or_without_verbose(
    docs: str, verbose: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "--source", docs, "--table", "docs", "--model", "tiny", "--where", "nosuch = 1", *verbose]
    assert main(argv) == 2
    err = capfd.readouterr().err.strip()
    assert err.splitlines()[-1].startswith("shardwise: error: where filter 'nosuch = 1' does not run"), err
    assert ("Traceback" in err) == bool(verbose), err
    assert ledger_runs(docs) == 0


@pytest.mark.parametrize("verbose", [[], ["-v"]], ids=["quiet", "verbose"])
def test_a_service_error_exits_3_with_or_without_verbose(
    verbose: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    url = f"postgresql+psycopg://root@127.0.0.1:{free_port()}/test"
    assert main(["run", "--source", url, "--table", "docs", "--model", "tiny", *verbose]) == 3
    err = capfd.readouterr().err.strip()
    assert "Connection refused" in err.splitlines()[-1] and ("Traceback" in err) == bool(verbose), err


def test_the_console_script_exits_2_on_a_bad_input_with_verbose(docs: str) -> None:
    argv = ["run", "--source", docs, "--table", "docs", "--model", "tiny", "--where", "nosuch = 1", "-v"]
    done = subprocess.run(
        [sys.executable, "-m", "shardwise.flows.cli", *argv], capture_output=True, text=True
    )
    assert done.returncode == 2 and "Traceback" in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("shardwise: error: where filter"), done.stderr


# 3. A redrive names its run.


def test_redrive_without_run_is_a_usage_error(docs: str, capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["redrive", "--source", docs, "--table", "docs", "--model", "tiny"])
    err = one_line(capfd)
    assert exited.value.code == 2, err
    assert "the following arguments are required: --run; see shardwise redrive --help" in err, err
    assert ledger_runs(docs) == 0


# 4. Stopping serve pauses what it served.


def _served(names: list[str]) -> dict[str, bool]:
    """Whether each deployment of ``names`` that exists now is live: not paused, every schedule active."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    async def read() -> dict[str, bool]:
        found: dict[str, bool] = {}
        async with get_client() as client:
            for name in names:
                try:
                    deployment = await client.read_deployment_by_name(name)
                except ObjectNotFound:
                    continue
                found[name] = not deployment.paused and all(s.active for s in deployment.schedules)
        return found

    return asyncio.run(read())


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize(
    ("stop", "when"),
    [(signal.SIGINT, "serving"), (signal.SIGTERM, "serving"), (signal.SIGTERM, "registering")],
    ids=["SIGINT", "SIGTERM", "SIGTERM-while-registering"],
)
def test_stopping_serve_pauses_the_served_deployments_and_their_schedules(
    stop: signal.Signals, when: str
) -> None:
    """Serving again (each case after the one before paused them) makes them live again.

    ``registering`` signals as soon as one deployment is live, while the others
    are still being registered and before Prefect's runner has taken over the
    signals: the stop must still be clean (exit 0, no hang) and pause what exists.
    """
    from prefect.settings import PREFECT_API_URL

    from shardwise.flows.deployments import runner_deployments

    names = [d.full_name for d in runner_deployments()]
    assert "score/nightly" in names
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    serve = [sys.executable, "-m", "shardwise.flows.cli", "serve"]
    serving = subprocess.Popen(serve, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120

        def ready(live: dict[str, bool]) -> bool:
            if when == "registering":
                return any(live.values())
            return live == dict.fromkeys(names, True)

        while not ready(live := _served(names)):
            if serving.poll() is not None or time.monotonic() > deadline:
                out = serving.communicate(timeout=30)[0]
                pytest.fail(f"serve did not make {names} live in 120 s ({live}):\n{out}")
            time.sleep(0.5)
        serving.send_signal(stop)
        out = serving.communicate(timeout=60)[0]
    finally:
        serving.kill()
    assert serving.returncode == 0, out
    left = _served(names)
    assert left and not any(left.values()), out
    if when == "serving":
        assert left == dict.fromkeys(names, False), out
    assert "paused score/nightly" in out and "serve again to resume them" in out, out


# 5. The tests keep to a Prefect home of their own.


def test_the_tests_never_use_the_users_prefect_home() -> None:
    from prefect.settings import PREFECT_HOME

    users = (Path.home() / ".prefect").resolve()
    home = Path(os.environ["PREFECT_HOME"]).resolve()
    assert home != users and users not in home.parents, home
    assert Path(PREFECT_HOME.value()).resolve() == home
    probe = "from prefect.settings import PREFECT_HOME; print(PREFECT_HOME.value())"
    child = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert Path(child.stdout.strip()).resolve() == home, "subprocesses inherit the tests' home"


# 7. One address for the Prefect server, one work pool name: prefect.yaml's.


def _help(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    from shardwise.flows.cli import _parser

    with pytest.raises(SystemExit):
        _parser().parse_args([command, "--help"])
    return capsys.readouterr().out


def test_deploy_help_names_the_work_pool_of_prefect_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    from shardwise.flows.deployments import load_deployment_configs

    pools = {c["work_pool"]["name"] for c in load_deployment_configs()}
    text = _help("deploy", capsys)
    assert pools == {"shardwise-local"}
    assert "prefect worker start --pool shardwise-local" in text, text
    assert "--pool shardwise)" not in text and "--pool shardwise " not in text, text


def test_help_and_messages_name_one_server_address(capsys: pytest.CaptureFixture[str]) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from shardwise.errors import ConfigError
    from shardwise.flows.serving import local_api_url, require_server

    url = local_api_url()
    assert url == "http://127.0.0.1:4200/api", "Prefect's default, unless PREFECT_SERVER_API_* say otherwise"
    for command in ("serve", "deploy"):
        assert f"PREFECT_API_URL={url} shardwise {command}" in _help(command, capsys)
    with temporary_settings({PREFECT_API_URL: None}), pytest.raises(ConfigError) as refused:
        require_server()
    assert f"export PREFECT_API_URL={url}" in str(refused.value)
    root = Path(__file__).parents[2]
    code = [p for d in ("flows", "tasks", "shardwise", "models") for p in (root / d).rglob("*.py")]
    hard_coded = [str(p) for p in code if ":4200/" in p.read_text()]
    assert not hard_coded, f"the address comes from Prefect's settings, not from {hard_coded}"
