"""What a result row says about where it came from: code version and input fingerprints."""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

from shardwise.hashing import text_fingerprint
from shardwise.text import TextPair

__all__ = ["code_version", "value_fingerprint"]

_ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def code_version() -> str:
    """``shardwise <version>``, plus ``+g<sha>`` (and ``.dirty``) when running from a git checkout."""
    from shardwise import __version__

    version = f"shardwise {__version__}"
    try:
        sha = subprocess.run(
            ["git", "-C", str(_ROOT), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return version  # an installed wheel: the package version is all there is
    return f"{version}+g{sha}{'.dirty' if dirty else ''}" if sha else version


def value_fingerprint(value: object) -> str | None:
    """Fingerprint of an input value as stored: text by its UTF-8 MD5, bytes by their MD5, else None.

    A :class:`~shardwise.text.TextPair` has the MD5 of its members'
    fingerprints, concatenated; None when either has none. The database
    computes the same (:mod:`shardwise.sources.sql_fingerprint`).
    """
    if isinstance(value, TextPair):
        text, pair = value_fingerprint(value.text), value_fingerprint(value.pair)
        return None if text is None or pair is None else text_fingerprint(text + pair)
    if isinstance(value, str):
        try:
            return text_fingerprint(value)
        except UnicodeEncodeError:
            return text_fingerprint(value.encode("utf-8", "surrogatepass").decode("utf-8", "replace"))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return hashlib.md5(bytes(value), usedforsecurity=False).hexdigest()
    return None
