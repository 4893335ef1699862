"""The examples of docs/how-to/extending.md, read from the page as a user copies them, and installed
out of the repository as its bash blocks say."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["PAGE", "examples", "install", "last_bash", "titled"]

PAGE = Path(__file__).resolve().parents[1] / "docs" / "how-to" / "extending.md"
_TITLED = re.compile(r'^```(\w+) title="([^"]+)"\n(.*?)^```$', re.S | re.M)
_BASH = re.compile(r"^```bash\n(.*?)^```$", re.S | re.M)
_PIP = re.compile(r"^pip install (\./[\w.-]+)$")
_FOLDER = re.compile(r"in a folder `([\w.-]+)`")


def examples() -> dict[str, str]:
    """The page's examples, by the folder their files go in: each one's text, up to the next example's."""
    text = PAGE.read_text()
    starts = [(m.start(), m.group(1)) for m in _FOLDER.finditer(text)]
    ends = [start for start, _ in starts[1:]] + [len(text)]
    return {folder: text[start:end] for (start, folder), end in zip(starts, ends, strict=True)}


def titled(folder: str) -> dict[str, str]:
    """The example's code blocks titled with a file name, by that name."""
    return {title: body for _, title, body in _TITLED.findall(examples()[folder])}


def last_bash(folder: str) -> str:
    blocks: list[str] = _BASH.findall(examples()[folder])
    return blocks[-1]


def install(root: Path, folder: str, files: set[str], docs: Sequence[tuple[int, str]]) -> dict[str, str]:
    """The example of ``folder`` (its titled ``files``), built offline and installed under ``root/site``
    as its bash block's first line says, and a SQLite ``docs`` table of ``docs``: the environment its
    commands run in from ``root`` (``SOURCE_URL``, ``OUT``)."""
    pip_line, *_ = last_bash(folder).splitlines()
    match = _PIP.match(pip_line)
    assert match, f"the example's bash block starts by installing the package: {pip_line!r}"
    package = root / match.group(1)
    package.mkdir()
    given = titled(folder)
    assert set(given) == files, set(given)
    for name, body in given.items():
        (package / name).write_text(body)
    site = root / "site"
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index"]
    proc = subprocess.run(
        [*command, "--target", str(site), match.group(1)], cwd=root, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(site.glob("*.dist-info/entry_points.txt")), "the entry point travels in the dist-info"
    source = root / "docs.db"
    with sqlite3.connect(source) as db:
        db.execute("create table docs (id integer primary key, text text not null)")
        db.executemany("insert into docs values (?, ?)", docs)
    return {
        **os.environ,
        "PYTHONPATH": str(site),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "SOURCE_URL": f"sqlite:///{source}",
        "OUT": str(root / "out"),
    }
