"""A URL's password typed on the command line is wiped from the process's own arguments (cmdline.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shardwise.process.cmdline import written_password

_CHILD = """
import os, subprocess, sys
from shardwise.process.cmdline import wipe_typed_passwords
kept = sys.argv[1:]
wipe_typed_passwords(kept)
# What another process reads: the kernel's copy, through a child that execs cat.
seen = subprocess.run(["cat", f"/proc/{os.getpid()}/cmdline"], capture_output=True).stdout
print(repr((seen.decode(), sys.argv[1:], sys.orig_argv[-3:], kept)))
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the kernel's copy is wiped on Linux only")
def test_the_kernel_and_python_copies_are_wiped_and_the_callers_copy_kept() -> None:
    url = "postgresql+psycopg://app:Pa%2Fss-Wipe7@db:5432/prod?sslmode=require"
    args = ["--source", url, "--results=s3://key:Other-Wipe8@bucket/x", "--table", "docs"]
    done = subprocess.run([sys.executable, "-c", _CHILD, *args], capture_output=True, text=True, check=True)
    seen, argv, orig, kept = eval(done.stdout)  # a repr of plain strings, from the child above
    for text in (seen, repr(argv), repr(orig)):
        assert "Wipe7" not in text and "Wipe8" not in text, text
    stars = "*" * len("Pa%2Fss-Wipe7")  # the same length as written: nothing else in the arguments moves
    assert f"--source\0postgresql+psycopg://app:{stars}@db:5432/prod?sslmode=require\0" in seen
    assert f"--results=s3://key:{'*' * len('Other-Wipe8')}@bucket/x\0--table\0docs" in seen
    assert kept == args, "the arguments the command parses keep their passwords"


def test_the_password_is_read_as_written() -> None:
    assert written_password("postgresql+psycopg://app:pa%40ss@db/prod") == "pa%40ss"
    assert written_password("postgresql+psycopg://app@db/prod") == ""
    assert written_password("s3://bucket/prefix") == ""
    assert written_password("postgresql+psycopg://:only@db/prod") == "only"
