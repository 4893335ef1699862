"""A canary secret appears nowhere: not on the terminal, in the ledger, the results, Prefect's database, nor
in the environment or arguments of any process a run starts.

Two ways in: a value reached through a name (``env:NAME``, ``secret:NAME``), which is never shown at all,
only its name; and a password typed in a URL on the command line, which the command holds in its memory
and hands to its workers inside their task calls, never through their environment.
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
        "spawn_main" in text or "multiprocessing" in text or "distributed" in text for _, text in samples
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
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {"PREFECT_HOME": str(home)}
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
