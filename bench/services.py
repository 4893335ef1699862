"""The services a whole-system benchmark starts: a Prefect server, a scratch database, CLI children.

Shared helpers of :mod:`bench.latency`; each child's output is read on a
thread, with the time each line arrived, so that a benchmark can time what a
child says.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["ROOT", "Lines", "child", "database", "prefect_server", "stop"]


class Lines:
    """A child process's output lines, each with the time it was read; echoed with ``prefix`` if verbose."""

    def __init__(self, proc: subprocess.Popen[str], prefix: str, verbose: bool) -> None:
        self.seen: list[tuple[float, str]] = []
        self._proc, self._prefix, self._verbose = proc, prefix, verbose
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self.seen.append((time.time(), line.rstrip()))
            if self._verbose:
                print(f"  [{self._prefix}] {line.rstrip()}", flush=True)

    def wait_for(self, text: str, timeout: float, after: float = 0.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, line in list(self.seen):
                if at >= after and text in line:
                    return at
            if self._proc.poll() is not None:
                raise RuntimeError(f"{self._prefix} exited: {self.tail()}")
            time.sleep(0.02)
        raise TimeoutError(f"{self._prefix}: no {text!r} in {timeout} s: {self.tail()}")

    def tail(self) -> str:
        return "\n".join(line for _, line in self.seen[-30:])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def prefect_server(verbose: bool) -> Iterator[str]:
    """``PREFECT_API_URL`` when set, else a ``prefect server start`` of our own (its home a temp dir)."""
    if os.environ.get("PREFECT_API_URL"):
        yield os.environ["PREFECT_API_URL"]
        return
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    home = tempfile.mkdtemp(prefix="lat-prefect-")
    env = {**os.environ, "PREFECT_HOME": home, "PREFECT_API_URL": url, "PREFECT_SERVER_UI_ENABLED": "false"}
    command = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    Lines(proc, "server", verbose)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("prefect server start did not come up in 120 s") from None
                time.sleep(0.5)
        os.environ["PREFECT_HOME"] = home
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


@contextmanager
def database(admin: str) -> Iterator[str]:
    """A fresh database beside ``admin``'s, dropped afterwards."""
    name = f"shardwise_latency_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'create database "{name}"'))
    try:
        yield sa.make_url(admin).set(database=name).render_as_string(hide_password=False)
    finally:
        with engine.connect() as conn:
            conn.execute(sa.text(f'drop database if exists "{name}" with (force)'))
        engine.dispose()


def child(
    argv: list[str], env: dict[str, str], name: str, verbose: bool
) -> tuple[subprocess.Popen[str], Lines]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardwise.flows.cli", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    return proc, Lines(proc, name, verbose)


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
