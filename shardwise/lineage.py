"""What a result row says about where it came from: code version and input fingerprints."""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

from shardwise.model.binary_value import BinaryValue
from shardwise.model.text import Inputs

__all__ = ["code_version", "value_fingerprint"]

_ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def code_version() -> str:
    """``shardwise <version>``, plus ``+g<sha>`` (and ``.dirty``) when running from a git checkout."""
    from shardwise import __version__

    version = f"shardwise {__version__}"

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(_ROOT), *args], capture_output=True, text=True, timeout=5)
        done.check_returncode()
        return done.stdout.strip()

    try:
        sha = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return version  # an installed wheel: the package version is all there is
    return f"{version}+g{sha}{'.dirty' if dirty else ''}" if sha else version


def value_fingerprint(value: object) -> str | None:
    """The input fingerprint of a value as stored, which notices when a row's input changed.

    Text has the hex MD5 of its UTF-8 bytes, bytes the MD5 of the bytes, a
    :class:`~shardwise.model.text.Inputs` (a text pair, a prompt's columns) the MD5 of
    its members' fingerprints concatenated (None when any has none), an
    :class:`~shardwise.model.binary_value.BinaryValue` the MD5 of its bytes (inline or
    fetched through a reference; None when it has none); anything else has None. MD5
    because PostgreSQL computes the same in SQL (``md5(text)``), so
    ``--only-new`` compares fingerprints inside the database
    (:mod:`shardwise.sources.sql.fingerprint` is that SQL twin). It identifies
    content; it is not a security measure. This is the one Python home of the rule.
    """
    if isinstance(value, Inputs):
        members = [value_fingerprint(member) for member in value]
        return None if None in members else _md5("".join(members).encode())  # type: ignore[arg-type]
    if isinstance(value, BinaryValue):
        return None if value.data is None else _md5(value.data)
    if isinstance(value, str):
        try:
            return _md5(value.encode("utf-8"))
        except UnicodeEncodeError:
            return _md5(value.encode("utf-8", "surrogatepass").decode("utf-8", "replace").encode("utf-8"))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _md5(bytes(value))
    return None


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()
