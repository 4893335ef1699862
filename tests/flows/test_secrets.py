"""A canary secret appears nowhere: not on the terminal, in the ledger, the results, Prefect's database, nor
in the environment or arguments of any process a run starts.

Two ways in: a value reached through a name (``env:NAME``, ``secret:NAME``), which is never shown at all,
only its name; and a password typed in a URL on the command line, which the command holds in its memory
and hands to its workers inside their task calls, never through their environment, and wipes from its
own command line. A location given by a name is recorded and shown by it too (summary, plan, runs,
artifacts, events, the ledger, a watcher's events and state, a store's error text), with a fingerprint
a resume matches.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from flow_data import execute, make_docs

from shardwise.flows.cli import main

CANARY = "Canary7-wJalrXUtnFEMI-K7MDENG"
"""Looks like an AWS secret key: the kind of value a mistyped ``env:`` name reaches."""


def _one_line(capfd: pytest.CaptureFixture[str]) -> str:
    captured = capfd.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return captured.out + captured.err


def test_a_value_reached_through_env_is_named_never_shown(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY_CANARY", CANARY)
    code = main(
        ["run", "--source", "env:AWS_SECRET_ACCESS_KEY_CANARY", "--results", sqlite_url, "--model", "tiny"]
    )
    shown = _one_line(capfd)
    assert code == 2, shown
    assert CANARY not in shown and "env:AWS_SECRET_ACCESS_KEY_CANARY" in shown, shown


def test_the_verbose_traceback_names_the_reference_too(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VERBOSE_CANARY", f"{CANARY}-verbose")
    argv = ["run", "--source", "env:VERBOSE_CANARY", "--results", sqlite_url, "--model", "tiny", "-v"]
    code = main(argv)
    captured = capfd.readouterr()
    shown = captured.out + captured.err
    assert code == 2 and "Traceback" in shown and "<env:VERBOSE_CANARY>" in shown, shown
    assert CANARY not in shown, shown


def test_a_short_value_reached_through_env_is_named_too(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SHORT_CANARY", "q7z")
    code = main(["run", "--source", "env:SHORT_CANARY", "--results", sqlite_url, "--model", "tiny"])
    shown = _one_line(capfd)
    assert code == 2 and "q7z" not in shown and "env:SHORT_CANARY" in shown, shown


@pytest.mark.usefixtures("prefect_harness")
def test_a_value_reached_through_a_secret_block_is_named_never_shown_or_stored(
    sqlite_url: str, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio

    from prefect import get_client
    from prefect.blocks.system import Secret

    block_canary = f"{CANARY}-block"  # a value of its own: the first name a value was reached by names it
    Secret(value=block_canary).save("canary-source", overwrite=True)
    code = main(["run", "--source", "secret:canary-source", "--results", sqlite_url, "--model", "tiny"])
    shown = _one_line(capfd)
    assert code == 2 and "secret:canary-source" in shown, shown

    async def flow_runs() -> str:
        async with get_client() as client:
            return repr([(r.parameters, r.state) for r in await client.read_flow_runs()])

    seen = {"terminal": shown, "logs": caplog.text, "prefect": asyncio.run(flow_runs())}
    assert not [where for where, text in seen.items() if block_canary in text], seen


def test_a_log_record_never_carries_a_value_reached_through_a_name(monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    from shardwise.tasks.connections import resolve

    monkeypatch.setenv("LOGGED_CANARY", CANARY + "-logged")
    assert resolve("env:LOGGED_CANARY") == CANARY + "-logged"
    record = logging.getLogger("shardwise.test").makeRecord(
        "shardwise.test", logging.ERROR, __file__, 1, "opening %s", (CANARY + "-logged",), None
    )
    assert record.getMessage() == "opening <env:LOGGED_CANARY>"
    try:
        raise ValueError(f"no such path {CANARY}-logged")
    except ValueError:
        failed = logging.getLogger("shardwise.test").makeRecord(
            "shardwise.test", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    assert CANARY not in logging.Formatter().format(failed)


def test_held_connections_show_their_names_only() -> None:
    from shardwise.tasks.connections import Held, hold, resolve

    reference = hold("canary-test", f"postgresql+psycopg://app:{CANARY}@db/prod")
    held = Held.of(reference, "env:OTHER", "sqlite:///x.db")
    assert reference == "held:canary-test" and repr(held) == "Held(held:canary-test)"
    assert CANARY not in repr(held) and CANARY not in str(held)
    assert resolve(reference).endswith(f"{CANARY}@db/prod")


def _watch_processes(root: int, seen: dict[int, list[tuple[float, str]]], stop: threading.Event) -> None:
    """Read the environment and arguments of ``root`` and every descendant while the run lasts, every
    sample kept: a forked worker shows its parent's arguments only for the instant before it execs."""
    while not stop.is_set():
        try:
            processes = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for process in processes:
            with contextlib.suppress(OSError, psutil.Error):
                text = (
                    Path(f"/proc/{process.pid}/environ").read_bytes().decode(errors="replace")
                    + "\0"
                    + Path(f"/proc/{process.pid}/cmdline").read_bytes().decode(errors="replace")
                )
                seen.setdefault(process.pid, []).append((time.monotonic(), text))
        time.sleep(0.02)


def _prefect_database(home: Path) -> str:
    return "".join(p.read_bytes().decode(errors="replace") for p in home.rglob("*") if p.is_file())


def _is_worker(samples: list[tuple[float, str]]) -> bool:
    return any(
        "spawn_main" in text or "multiprocessing" in text or "distributed" in text or "dask worker" in text
        for _, text in samples  # Dask's workers retitle themselves "dask worker [...]" with setproctitle
    )


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("runner", ["process", "dask"])
def test_a_cli_password_reaches_local_workers_but_no_environment_argv_log_or_store(
    pg_url: str, tmp_path: Path, runner: str, request: pytest.FixtureRequest
) -> None:
    """Trust auth takes any password, so the canary really travels in the URL the workers connect with.

    Every sample of every worker's environment and arguments is free of it, and so is the command's own
    command line once the workers exist: the command wipes the password from its arguments as it holds
    the URL, before any worker is forked (a forked worker shows them until it execs).
    """
    if runner == "dask":
        request.getfixturevalue("dask_extra")
    make_docs(pg_url, 200)
    secret_url = pg_url.replace("root@", f"root:{CANARY}@")
    home = tmp_path / "prefect-home"
    # An earlier Dask test's nanny leaves __DASK_PARENT_PID in this process's environment; inherited, it
    # makes the command's own Dask scheduler retitle the command ("dask scheduler [...]").
    dropped = {"PREFECT_API_URL", "__DASK_PARENT_PID"}
    env = {k: v for k, v in os.environ.items() if k not in dropped} | {"PREFECT_HOME": str(home)}
    argv = ["run", "--source", secret_url, "--table", "docs", "--model", "tiny", "--shards", "4"]
    argv += ["--runner", runner, "--workers", "2", "--progress", "none"]
    cli = subprocess.Popen(
        [sys.executable, "-m", "shardwise.flows.cli", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: dict[int, list[tuple[float, str]]] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_processes, args=(cli.pid, seen, stop), daemon=True)
    watcher.start()
    out, err = cli.communicate(timeout=600)
    stop.set()
    watcher.join()
    assert cli.returncode == 0, out + err
    assert "completed: 200 rows scored" in out, out
    workers = {pid: samples for pid, samples in seen.items() if pid != cli.pid and _is_worker(samples)}
    assert len(workers) >= 2, f"the {runner} runner's workers were not seen: {len(seen)} processes"
    # The command's own arguments from the first sample taken once a worker existed.
    first_worker = min(samples[0][0] for samples in workers.values())
    own = [text for at, text in seen[cli.pid] if at >= first_worker]
    tables = [t for (t,) in execute(pg_url, "select tablename from pg_tables where schemaname = 'public'")]
    stored = {t: repr(execute(pg_url, f'select * from "{t}"')) for t in tables}
    places = {
        "terminal": out + err,
        "prefect database": _prefect_database(home),
        "the command's own command line once workers ran": "".join(own),
        **{f"table {t}": text for t, text in stored.items()},
        **{
            f"process {pid} environ/argv": "".join(text for _, text in samples)
            for pid, samples in seen.items()
            if pid != cli.pid
        },
    }
    assert "shardwise_results" in stored and "shardwise_runs" in stored
    leaked = [where for where, text in places.items() if CANARY in text]
    assert not leaked, f"the canary password is in: {leaked}"
    assert any(f"root:{'*' * len(CANARY)}@" in text for text in own), "the command line shows it masked"


# A location given by reference (env:NAME, secret:NAME) is named by it everywhere, never by its value.

REF_PASSWORD = "Canary8-pw"
REF_FOLDER = "lake-Canary8Dir"


def _at(params: dict, path: tuple[str, ...]) -> object:
    """The value at ``path`` in nested parameters (None where a section lacks it)."""
    for part in path:
        params = params.get(part) if isinstance(params, dict) else None  # type: ignore[assignment]
    return params


def _prefect_records(flow_run_id: str) -> str:
    """What Prefect holds about the runs given by name (the two given a URL itself hold it, as typed): their
    parameters and states, and the run's artifacts."""
    import asyncio

    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.client.schemas.sorting import FlowRunSort

    async def read() -> str:
        async with get_client() as client:
            latest = await client.read_flow_runs(sort=FlowRunSort.EXPECTED_START_TIME_DESC, limit=10)
            by_name = [(("source", "location"), "env:SW8_SOURCE"), (("ledger",), None)]
            runs = [
                (r.parameters, r.state)
                for r in latest
                if all(_at(r.parameters["params"], path) == value for path, value in by_name)
            ]
            assert len(runs) == 2, "the run and its resume by name"
            artifacts = await client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
            )
            assert {"shardwise-run", "shardwise-shards"} <= {a.key for a in artifacts}
            return repr(runs) + "".join(str(a.data) for a in artifacts)

    return asyncio.run(read())


def _ledger(url: str) -> dict[str, str]:
    tables = execute(url, "select tablename from pg_tables where tablename like 'shardwise%'")
    return {t: repr(execute(url, f'select * from "{t}"')) for (t,) in tables}


@pytest.mark.postgres
@pytest.mark.usefixtures("prefect_harness")
def test_locations_given_by_reference_are_named_and_never_shown_or_stored(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A source (a password-bearing PostgreSQL URL) and results (a Delta folder) given as env:NAME: plan,
    the run's summary, runs, the artifacts, the event, Prefect's records and every ledger row name them
    <env:NAME>; a resume matches them by fingerprint, given by name or as the URL itself."""
    import importlib

    import sqlalchemy as sa

    database = str(sa.make_url(pg_url).database)  # a fresh, unique name: it shows only if the URL does
    make_docs(pg_url, 30)
    monkeypatch.setenv("SW8_SOURCE", pg_url.replace("root@", f"root:{REF_PASSWORD}@"))
    monkeypatch.setenv("SW8_RESULTS", str(tmp_path / REF_FOLDER))
    events: list[dict] = []
    module = importlib.import_module("shardwise.tasks.events")
    monkeypatch.setattr(module, "emit_event", lambda **event: events.append(event))
    given = ["--source", "env:SW8_SOURCE", "--table", "docs", "--model", "tiny", "--precision", "fp32"]
    given += ["--results", "env:SW8_RESULTS", "--shards", "2"]
    shown: dict[str, str] = {}

    def command(name: str, argv: list[str], code: int = 0) -> str:
        assert main(argv) == code, capfd.readouterr()
        captured = capfd.readouterr()
        shown[name] = captured.out + captured.err
        return shown[name]

    assert "source <env:SW8_SOURCE>#public.docs (sha256:" in command("plan", ["plan", *given])
    summary = command("run", ["run", *given, "--progress", "none"])
    assert "-> delta:<env:SW8_RESULTS>/shardwise_results (sha256:" in summary, summary
    run_id = summary.split()[1]
    assert run_id in command("runs", ["runs", "--ledger", "env:SW8_SOURCE"])
    command("runs of a missing ledger", ["runs", "--results", "env:SW8_RESULTS"], code=2)
    command("resume by name", ["run", *given, "--resume", run_id])
    literal = ["--source", pg_url, "--results", str(tmp_path / REF_FOLDER)]
    assert main(["run", *given, *literal, "--resume", run_id]) == 0, "the URL itself matches by fingerprint"
    capfd.readouterr()

    # The name now reaches another source, with a docs table too: the resume is refused, naming both by name.
    other = tmp_path / "other.db"
    make_docs(f"sqlite:///{other}", 3)
    monkeypatch.setenv("SW8_SOURCE", f"sqlite:///{other}")
    monkeypatch.setenv("SW8_LEDGER", pg_url)  # by reference too: the resume hint names what it was given
    refused = command(
        "resume of another source", ["run", *given, "--ledger", "env:SW8_LEDGER", "--resume", run_id], 2
    )
    assert f"finish it with: shardwise run --ledger env:SW8_LEDGER --resume {run_id}" in refused, refused
    assert "read source '<env:SW8_SOURCE>#public.docs (sha256:" in refused, refused
    assert "not '<env:SW8_SOURCE>#main.docs (sha256:" in refused, refused

    ledger = _ledger(pg_url)
    assert "'<env:SW8_SOURCE>#public.docs (sha256:" in ledger["shardwise_runs"]
    named = "delta:<env:SW8_RESULTS>/"
    assert events and all(e["payload"]["results_table"].startswith(named) for e in events), events
    places = {
        **{f"the output of {name}": text for name, text in shown.items()},
        **{f"ledger table {table}": text for table, text in ledger.items()},
        "prefect's flow runs and the run's artifacts": _prefect_records(run_id),
        "the events": repr(events),
    }
    for marker in (database, REF_PASSWORD, REF_FOLDER, str(other)):
        leaked = [where for where, text in places.items() if marker in text]
        assert not leaked, f"{marker!r} is in: {leaked}"


def test_a_delta_error_quoting_a_results_location_given_by_reference_names_it(
    sqlite_url: str, tmp_path: Path
) -> None:
    """delta-rs's error names the S3 path it could not reach (``GET http://host/bucket/prefix/...``): the
    command's lines name the location <env:NAME>, and show no part of the bucket and prefix (a command of
    its own: a clean process, as an operator runs it)."""
    make_docs(sqlite_url, 5)
    closed = socket_nobody_listens_on()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "SW8_LAKE": "s3://canary8-bucket/canary8-prefix",
        "AWS_ENDPOINT_URL": closed,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    argv = ["run", "--source", sqlite_url, "--table", "docs", "--model", "tiny", "--results", "env:SW8_LAKE"]
    argv += ["--ledger", sqlite_url, "--retry-deadline", "1", "--progress", "none"]
    command = [sys.executable, "-m", "shardwise.flows.cli", *argv]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    shown = done.stdout + done.stderr
    assert done.returncode in (2, 3), shown
    assert "Generic S3 error" in shown and "opening delta:<env:SW8_LAKE>/shardwise_results (sha256:" in shown
    if "Error performing GET" in shown:  # the request delta-rs quotes, where the sink keeps it
        assert f"{closed.removeprefix('http://')}/<env:SW8_LAKE>/" in shown, shown
    assert "canary8" not in shown, shown


def socket_nobody_listens_on() -> str:
    """``http://127.0.0.1:PORT`` of a port just closed: connections to it are refused at once."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.mark.postgres
@pytest.mark.usefixtures("prefect_harness")
def test_a_watched_source_given_by_reference_is_named_in_events_output_and_state(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``shardwise watch --source env:NAME``: the events it emits, the lines it prints and the state it keeps
    in the watched database name the source <env:NAME>, never its URL."""
    import signal

    import sqlalchemy as sa

    from shardwise.flows.watch import watch
    from shardwise.watch import WatchSpec

    database = str(sa.make_url(pg_url).database)
    make_docs(pg_url, 3, bad=False)
    monkeypatch.setenv("SW8_WATCHED", pg_url.replace("root@", f"root:{REF_PASSWORD}@"))
    sent: list[dict] = []
    monkeypatch.setattr("prefect.events.emit_event", lambda **event: sent.append(event))

    def land_then_stop() -> None:
        time.sleep(1.5)  # the first look is the baseline
        execute(pg_url, "insert into docs (id, text) values (1000, 'a new row')")
        deadline = time.monotonic() + 60
        while not sent and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGTERM)  # watch's own handler stops it

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    stopper = threading.Thread(target=land_then_stop, daemon=True)
    stopper.start()
    try:
        watch(WatchSpec("env:SW8_WATCHED", "docs", table="docs", mode="poll", interval_s=0.2))
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    stopper.join()
    printed = capsys.readouterr().out
    (event,) = sent
    assert event["payload"]["source"].startswith("<env:SW8_WATCHED>#public.docs (sha256:"), event
    state = repr(execute(pg_url, "select * from shardwise_watch_state"))
    assert "<env:SW8_WATCHED>#public.docs (sha256:" in state
    for where, text in {"output": printed, "event": repr(sent), "state": state}.items():
        assert database not in text and REF_PASSWORD not in text, (where, text)


@pytest.mark.usefixtures("prefect_harness")
def test_a_parquet_folder_given_by_reference_is_recorded_by_it_and_only_new_still_finds_its_objects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The objects a run scored are remembered under the name the source was given by, so a later
    --only-new run by the same name skips them; the run's record and summary name the folder by it."""
    import json

    import polars as pl

    folder = tmp_path / "parquet-Canary8Folder"
    folder.mkdir()
    rows = pl.DataFrame({"id": list(range(20)), "text": [f"row {i}" for i in range(20)]})
    rows.write_parquet(folder / "a.parquet")
    monkeypatch.setenv("SW8_PARQUET", str(folder))
    results = f"sqlite:///{tmp_path / 'results.db'}"
    given = ["run", "--source", "env:SW8_PARQUET", "--model", "tiny", "--results", results]
    given += ["--progress", "none"]
    assert main(given) == 0
    assert main([*given, "--only-new"]) == 0
    out = capfd.readouterr().out
    assert "20 skipped (20 in files a completed run already read" in out and "Canary8Folder" not in out, out
    runs = execute(results, "select source_identity, plan from shardwise_runs")
    assert len(runs) == 2
    for identity, plan in runs:
        assert identity.startswith("<env:SW8_PARQUET> (sha256:"), identity
        stored = json.loads(plan)
        assert (stored["identity"], stored["params"]["location"]) == (identity, identity)
    seen = execute(results, "select distinct source_identity from shardwise_objects")
    assert seen == [(runs[0][0],)]
