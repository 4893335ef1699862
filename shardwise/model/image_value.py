"""What an image row's value is when a source hands it to a model: the image's bytes, or why there are none.

A source reading an image column (``--image-column``) gives every row an
:class:`ImageValue`: the bytes stored inline (PostgreSQL ``bytea``, Parquet
binary), or the bytes a reference (a local path, ``file://`` or ``s3://`` URI)
points at, fetched by the source. A reference it could not resolve (a missing
file or object) still becomes a row, with ``error`` saying why, so the model
turns it into a dead letter and the run goes on. Decoding is the model's
(see :mod:`shardwise.model.images`); nothing here imports Pillow.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ImageValue"]


@dataclass(frozen=True, slots=True)
class ImageValue:
    """One image row: its encoded bytes (PNG, JPEG, WebP...) or the reason they could not be read."""

    data: bytes | None
    origin: str = "inline"
    """``inline`` for stored bytes, else the reference as given (a path or URI; never a credential)."""
    error: str | None = None
    """Why there are no bytes (``no such object s3://...``); None when ``data`` holds them."""

    def __repr__(self) -> str:  # the bytes never go to a log line
        size = "none" if self.data is None else f"{len(self.data)} bytes"
        return f"ImageValue({self.origin!r}, {size}{'' if self.error is None else ', ' + self.error})"
