"""Reading a file a user named: a regular file only, within a byte cap and a time bound, or one line why."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from shardwise import bounded_read
from shardwise.bounded_read import read_regular_file
from shardwise.errors import ConfigError


def _refused(path: str | Path, max_bytes: int = 1 << 20) -> str:
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        read_regular_file(path, what="--json-schema", max_bytes=max_bytes)
    assert time.monotonic() - started < 5, "refusing must not wait"
    said = str(caught.value)
    assert "\n" not in said and said.startswith(("--json-schema ", "cannot read --json-schema ")), said
    return said


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "schema.json"
    path.write_bytes(b'{"type": "object"}')
    assert read_regular_file(path, what="--json-schema", max_bytes=18) == b'{"type": "object"}'


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "schema.json"
    os.mkfifo(fifo)
    said = _refused(fifo)
    assert said == (
        f"--json-schema {str(fifo)!r} is a FIFO (named pipe), not a regular file; give the path of a regular "
        "file (a FIFO or a device could block or never end)"
    )


@pytest.mark.parametrize(
    ("path", "kind"), [("/dev/zero", "a character device"), ("/dev/null", "a character device")]
)
def test_a_device_is_refused_before_a_byte_is_read(path: str, kind: str) -> None:
    assert f"{path!r} is {kind}, not a regular file" in _refused(path)


def test_a_directory_and_a_socket_are_refused(tmp_path: Path) -> None:
    assert "is a directory, not a regular file" in _refused(tmp_path)
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "s"))
        said = _refused(tmp_path / "s")  # open() itself fails on a socket
    assert "(No such device or address); give the path of a readable file" in said, said


def test_a_symlink_to_a_device_is_refused_by_what_it_opens(tmp_path: Path) -> None:
    link = tmp_path / "schema.json"
    link.symlink_to("/dev/zero")
    assert "is a character device, not a regular file" in _refused(link)


def test_a_file_over_the_cap_is_refused_never_cut(tmp_path: Path) -> None:
    path = tmp_path / "schema.json"
    path.write_bytes(b"x" * 2049)
    assert read_regular_file(path, what="--json-schema", max_bytes=2049) == b"x" * 2049
    said = _refused(path, max_bytes=2048)
    assert (
        said == f"--json-schema {str(path)!r} is larger than 2 KiB, the most read for it; give a smaller file"
    )


def test_a_missing_file_says_so() -> None:
    said = _refused("/nonexistent/schema.json")
    assert said == (
        "cannot read --json-schema '/nonexistent/schema.json' (No such file or directory); "
        "give the path of a readable file"
    )


def test_a_read_that_hangs_is_given_up_after_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file on a hung network file system: the reading thread is left behind, the caller is not."""
    hung = threading.Event()
    monkeypatch.setattr(bounded_read, "_read", lambda *args: hung.wait(30))
    started = time.monotonic()
    with pytest.raises(
        ConfigError, match=r"took longer than 0\.3 s \(a file on a hung network file system\?\)"
    ):
        read_regular_file(tmp_path, what="--json-schema", max_bytes=10, timeout_s=0.3)
    assert time.monotonic() - started < 5
    hung.set()
