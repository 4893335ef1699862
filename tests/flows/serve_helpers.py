"""A ``shardwise`` command as a child process whose merged output the test reads: serve, watch."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

__all__ = ["Output", "start", "stop"]


class Output:
    """A child's merged output, read on a thread so that the child never blocks on a full pipe."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, needle: str, proc: subprocess.Popen[str], timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no {needle!r} in the output within {timeout} s:\n{self.text()[-4000:]}")
            time.sleep(0.2)


def start(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], Output]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardwise.flows.cli", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, Output(proc)


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
