"""``shardwise run`` stopped by SIGINT or SIGTERM while a worker is blocked for ever in a read.

A row makes its worker open a FIFO that no one writes (``plugin_blocking``):
the thread scoring it waits in the kernel, as a fetch of a FIFO named by an
image column did. The command must still end within seconds of the signal,
print one line naming the run and ``--resume``, exit 130 (SIGINT) or 143
(SIGTERM), leave nothing running, and leave the run resumable at once: its
lease released, and ``--resume RUN_ID`` then finishes it with exactly the
rows of a run that was never stopped.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import sqlalchemy as sa
from flow_data import execute, make_docs
from kill_helpers import survivors

from shardwise.results import Ledger
from shardwise.results.leases import lease_live

pytestmark = pytest.mark.slow

PLUGINS = Path(__file__).resolve().parent.parent / "models"
ROWS = 40
STOPPED_WITHIN_S = 15.0
"""The command's own bound is 5 s (flows.interrupts.STOP_S); the rest is slack for a busy 2-core host."""


def _argv(url: str, table: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "shardwise.flows.cli", "run", "--source", url, "--table", "docs",
        "--model", "plugin_blocking:spec", "--results-table", table, "--shards", "2", "--workers", "1",
        "--progress", "none", *extra,
    ]  # fmt: skip


def _environment(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


def _docs(url: str) -> None:
    """``docs`` with ``ROWS`` texts and, last (so in the last shard), the row that blocks its worker."""
    sys.path.insert(0, str(PLUGINS))
    from plugin_blocking import BLOCK_ON

    make_docs(url, ROWS, bad=False)
    execute(url, "insert into docs (id, text) values (:id, :text)", {"id": ROWS, "text": BLOCK_ON})


def _start_blocked(argv: list[str], fifo: Path, **popen: object) -> subprocess.Popen[str]:
    """Start the command and wait until its worker is stuck on the FIFO."""
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        argv,
        env=_environment(SHARDWISE_TEST_BLOCK_FIFO=str(fifo)),
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )
    deadline = time.monotonic() + 240
    while not Path(f"{fifo}.blocked").exists():
        if proc.poll() is not None:
            pytest.fail(f"the run ended ({proc.returncode}) before its worker blocked: {proc.stderr.read()}")
        assert time.monotonic() < deadline, "the worker never reached the blocking row"
        time.sleep(0.1)
    time.sleep(1.0)  # the worker is in open(): a blocked thread, not one about to block
    return proc


def _descendants(pid: int) -> dict[psutil.Process, str]:
    found = {}
    for child in psutil.Process(pid).children(recursive=True):
        try:
            found[child] = " ".join(child.cmdline())[:120]
        except psutil.Error:
            continue
    return found


def _stop(proc: subprocess.Popen[str], sig: int, *, group: bool = False) -> tuple[int, str, float]:
    """Send ``sig`` (to the process group, as a terminal's Ctrl-C does, with ``group``); wait for the end."""
    sent = time.monotonic()
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the run outlived {signal.Signals(sig).name} by 120 s: {err[-2000:]}")
    return proc.returncode, err, time.monotonic() - sent


def _check_stopped(url: str, sig: int, code: int, err: float | str, took_s: float) -> str:
    """One line naming the run and --resume, the exit code, and the run left resumable; its id."""
    assert code == 128 + sig, err
    assert took_s < STOPPED_WITHIN_S, f"stopped {took_s:.1f} s after the signal"
    lines = [line for line in str(err).splitlines() if line.strip()]
    ((run_id, status),) = execute(url, "select run_id, status from shardwise_runs")
    name = signal.Signals(sig).name
    assert lines == [
        f"shardwise: interrupted by {name}: run {run_id} stopped; what it committed stays committed; "
        f"finish it with: {_finish(url, run_id)}"
    ], err
    assert status == "running"  # not finished: resumable
    with Ledger(url) as ledger:
        summary = ledger.run_summary(run_id)
    assert summary is not None and not lease_live(summary.lease_expires_at), "its lease was not released"
    return run_id


def _finish(url: str, run_id: str) -> str:
    """The command the line prints: what finds the run's ledger (the source's database), and its id."""
    return f"shardwise run --source {url} --resume {run_id}"


def _check_resumed_exactly(url: str, run_id: str) -> None:
    """The command the line printed finishes the run, as printed (issue 45)."""
    printed = [sys.executable, "-m", "shardwise.flows.cli", *shlex.split(_finish(url, run_id))[1:]]
    resumed = subprocess.run(printed, env=_environment(), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    clean = _argv(url, "clean")
    assert subprocess.run(clean, env=_environment(), capture_output=True).returncode == 0
    query = "select source_key, embedding from {} order by source_key"
    stopped, reference = (execute(url, query.format(t)) for t in ("stopped", "clean"))
    assert len(stopped) == ROWS + 1 and stopped == reference
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        runs = {r for (r,) in conn.execute(sa.text("select distinct run_id from stopped"))}
    engine.dispose()
    assert runs == {run_id}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_a_blocked_run_in_seconds_and_resume_finishes_it(
    sqlite_url: str, tmp_path: Path, sig: int
) -> None:
    _docs(sqlite_url)
    argv = _argv(sqlite_url, "stopped")
    proc = _start_blocked(argv, tmp_path / "fifo")
    children = _descendants(proc.pid)
    code, err, took_s = _stop(proc, sig)
    run_id = _check_stopped(sqlite_url, sig, code, err, took_s)
    assert survivors(children, within_s=10) == []  # the temporary server and its guard too
    done = execute(sqlite_url, "select count(*) from stopped")[0][0]
    assert 0 < done < ROWS + 1  # the first shard committed, the blocked one did not
    _check_resumed_exactly(sqlite_url, run_id)


def test_ctrl_c_to_the_process_group_stops_a_process_pool_run(sqlite_url: str, tmp_path: Path) -> None:
    """Ctrl-C reaches every process of the terminal's group: the workers leave the stop to the command,
    and die with it; still one line, 130, and the run resumable."""
    _docs(sqlite_url)
    argv = _argv(sqlite_url, "stopped", "--runner", "process")
    proc = _start_blocked(argv, tmp_path / "fifo", start_new_session=True)
    children = _descendants(proc.pid)
    assert any("multiprocessing" in line or "spawn" in line for line in children.values()), children
    code, err, took_s = _stop(proc, signal.SIGINT, group=True)
    run_id = _check_stopped(sqlite_url, signal.SIGINT, code, err, took_s)
    assert not re.search(r"Traceback|KeyboardInterrupt", err), err
    assert survivors(children, within_s=10) == []
    _check_resumed_exactly(sqlite_url, run_id)
