"""``shardwise runs | head -1``: a reader that closes stdout early is not a service failure (issue 24).

The command stops quietly, says nothing on stderr, and exits 141 (128 + SIGPIPE, as a shell reports
any Unix tool stopped so); see :mod:`shardwise.flows.outcome`. The pipes here are real: their read end
is closed before the command writes, so its first write or its final flush meets ``EPIPE``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardwise.flows.outcome import BROKEN_PIPE, stdout_closed

SHARDWISE = Path(sys.executable).with_name("shardwise")


def _into_a_closed_pipe(argv: list[str]) -> subprocess.CompletedProcess[str]:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command prints a line
    try:
        return subprocess.run(argv, stdout=write, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)


def test_the_console_script_exits_141_quietly_when_its_last_lines_cannot_be_flushed(docs: str) -> None:
    """A pipe's stdout is block-buffered: the listing meets the closed pipe at the final flush."""
    done = _into_a_closed_pipe([str(SHARDWISE), "runs", "--results", docs])
    assert (done.returncode, done.stderr) == (BROKEN_PIPE, "")


def test_a_command_whose_print_meets_the_closed_pipe_exits_141_quietly(docs: str) -> None:
    """Unbuffered (``python -u``), the command's own print meets the closed pipe, inside the command."""
    argv = [sys.executable, "-u", "-m", "shardwise.flows.cli", "runs", "--results", docs]
    done = _into_a_closed_pipe(argv)
    assert (done.returncode, done.stderr) == (BROKEN_PIPE, "")


def test_a_broken_pipe_that_is_not_stdout_stays_an_error(capfd: pytest.CaptureFixture[str]) -> None:
    """A broken pipe to a socket or a child process is reported as the error it is (stdout is fine)."""
    assert not stdout_closed(BrokenPipeError(32, "Broken pipe"))
    assert not stdout_closed(ConnectionResetError())
    print("stdout still writes")
    assert capfd.readouterr().out == "stdout still writes\n"
