"""A binary column read as text: whether a sample of its values holds text, or pictures and other bytes.

A binary text column (PostgreSQL ``bytea``, SQLite ``BLOB``, Parquet
``binary``) is scored as the UTF-8 text it holds, a documented choice: some
applications store text so. But the same type holds pictures, and a text
model given a column of pictures dead-letters every row. Its type alone
cannot tell the two apart, so a source samples the first bytes of a few of
its values (:data:`SAMPLE_ROWS` values, :data:`PREFIX_BYTES` bytes of each)
before planning, and :func:`binary_values` calls the column ``bytes`` when
none of them is text: each is a picture (its file signature says so) or not
valid UTF-8. One text value among them, or none to sample, keeps it ``text``:
a run is refused only when it could score nothing the sample shows.
"""

from __future__ import annotations

import codecs
from collections import Counter
from collections.abc import Sequence

from shardwise.sources.base import SourceValues

__all__ = ["PREFIX_BYTES", "SAMPLE_ROWS", "binary_values", "picture_format"]

SAMPLE_ROWS = 16
"""Values a source samples from a binary column read as text."""
PREFIX_BYTES = 64
"""Bytes read of each: enough for any file signature, and to tell UTF-8 text from binary data."""

_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"BM", "BMP"),
)


def picture_format(prefix: bytes) -> str | None:
    """The picture format whose file signature ``prefix`` starts with (PNG, JPEG, WebP...), or None."""
    if prefix[:4] == b"RIFF" and prefix[8:12] == b"WEBP":
        return "WebP"
    return next((name for signature, name in _SIGNATURES if prefix.startswith(signature)), None)


def _is_text(prefix: bytes | str) -> bool:
    """A value's first bytes are UTF-8 text (a character cut at the end is fine) and no picture."""
    if isinstance(prefix, str):
        return True  # a column of no declared type (SQLite) may hold texts as well as bytes
    if picture_format(prefix) is not None:
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(prefix, final=False)
    except UnicodeDecodeError:
        return False
    return True


def binary_values(what: str, column: str, typed: str, sample: Sequence[bytes | str]) -> SourceValues:
    """What the binary text column ``column`` holds, judged by ``sample``: the first bytes of some of its
    non-NULL values. ``what`` names it in messages, ``typed`` says its type (``BLOB column``)."""
    if not sample or any(_is_text(value) for value in sample):
        return SourceValues("text", what, column)
    found = Counter(picture_format(value) or "not UTF-8" for value in sample if isinstance(value, bytes))
    held = ", ".join(f"{count} {name}" for name, count in found.most_common())
    detail = f"a {typed}, and none of the {len(sample)} values sampled is UTF-8 text ({held})"
    return SourceValues("bytes", what, column, detail)
