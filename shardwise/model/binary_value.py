"""What a binary row's value is when a source hands it to a model: the bytes, or why there are none.

A source reading a column of bytes (``--image-column``, or an image folder) gives every row a
:class:`BinaryValue`: the bytes stored inline (PostgreSQL ``bytea``, Parquet
binary), or the bytes a reference (a local path, ``file://`` or ``s3://`` URI)
points at, fetched by the source. Nothing here is particular to images: the
bytes are whatever the column holds (a picture today; a sound or a document
for a model kind that reads those). A reference it could not resolve (a
missing file or object) still becomes a row, with ``error`` saying why, so the
model turns it into a dead letter and the run goes on. Decoding is the
model's (see :mod:`shardwise.model.images` for pictures); nothing here imports
Pillow.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BinaryValue"]


@dataclass(frozen=True, slots=True)
class BinaryValue:
    """One binary row: its encoded bytes (a PNG, JPEG or WebP picture, say) or the reason they could not
    be read."""

    data: bytes | None
    origin: str = "inline"
    """``inline`` for stored bytes, else the reference as given (a path or URI; never a credential)."""
    error: str | None = None
    """Why there are no bytes (``no such object s3://...``); None when ``data`` holds them."""

    def __repr__(self) -> str:  # the bytes never go to a log line
        size = "none" if self.data is None else f"{len(self.data)} bytes"
        return f"BinaryValue({self.origin!r}, {size}{'' if self.error is None else ', ' + self.error})"
