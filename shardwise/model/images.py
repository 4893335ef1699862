"""Decode an image row's bytes into an RGB picture on the CPU, with Pillow, or say why it cannot be.

Every image model decodes through :func:`decode`, so every model reads the
same pixels from the same bytes:

* **What is accepted**: an :class:`~shardwise.model.binary_value.BinaryValue` or raw
  ``bytes`` holding any format Pillow reads (PNG, JPEG, WebP, GIF, BMP,
  TIFF...). An animated image gives its first frame.
* **Size first**: the header's width x height is checked against
  ``max_pixels`` *before* any pixel is decoded, so a decompression bomb costs
  a header read, and every picture too large gets the one message, ``image is
  WxH = N pixels, over the limit of M``. Pillow's own guard
  (``Image.MAX_IMAGE_PIXELS``) is set here to :data:`PILLOW_LIMIT` rather than
  left at whatever another library set it to, and stays on for the whole
  process. Only :func:`decode`'s own header read (:func:`_identify`) goes
  without the check ``Image.open`` makes once a header is read, since that
  check would refuse a picture over twice the guard with Pillow's words (and
  warn, on stderr, of one over it) before the size could be compared here;
  the comparison that replaces it is stricter (``max_pixels`` is at most the
  guard) and comes before any pixel is decoded, so decoding stays bounded.
  A format's reader that runs the guard itself while reading its header (a
  GIF frame reaching past the picture's declared size) is still refused, as
  ``image is over N pixels, over the limit of M``.
* **Whole files only**: ``ImageFile.LOAD_TRUNCATED_IMAGES`` is never set and
  the pixels are loaded here, so a truncated file is an error, not a picture
  with a grey bottom half.
* **Upright**: the EXIF orientation tag is applied (a phone's portrait photo
  is scored upright), then dropped.
* **RGB**: every mode (L, P, LA, PA, RGBA, CMYK, I;16...) becomes RGB. A
  picture with transparency is composited on **white**: a transparent
  background is what a viewer shows as white, where Pillow's plain
  ``convert("RGB")`` would show the colour stored under the transparent pixels
  (often black).

A value that cannot be decoded raises :class:`~shardwise.errors.InputError`
naming the reason; its row becomes a dead letter and the run goes on.
Importing this module imports Pillow, so import it before ``transformers``
(which looks for Pillow when it is first imported).
"""

from __future__ import annotations

import io
import struct

from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from shardwise.errors import ConfigError, InputError
from shardwise.model.binary_value import BinaryValue

__all__ = ["DEFAULT_MAX_PIXELS", "PILLOW_LIMIT", "WHITE", "check_max_pixels", "decode", "to_rgb"]

DEFAULT_MAX_PIXELS = 50_000_000
"""The largest picture decoded by default: 50 megapixels (a full-frame camera's photo is about 45)."""
PILLOW_LIMIT = 250_000_000
"""Pillow's decompression-bomb guard as set here; ``max_pixels`` may not exceed it."""
WHITE = (255, 255, 255)

Image.MAX_IMAGE_PIXELS = PILLOW_LIMIT
ImageFile.LOAD_TRUNCATED_IMAGES = False


def check_max_pixels(max_pixels: int) -> int:
    """``max_pixels`` if it is a whole number from 1 to :data:`PILLOW_LIMIT`, else a ConfigError."""
    if isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or not 1 <= max_pixels <= PILLOW_LIMIT:
        raise ConfigError(
            f"max_pixels must be a whole number from 1 to {PILLOW_LIMIT:,} (Pillow's guard as Shardwise sets "
            f"it); got {max_pixels!r}. The default is {DEFAULT_MAX_PIXELS:,}"
        )
    return max_pixels


def decode(value: object, max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """The upright RGB picture in ``value`` (an :class:`BinaryValue` or ``bytes``), decoded in full.

    Raises :class:`InputError` naming the reason for a missing, empty,
    unreadable, truncated or too large image, or a value of another type.
    """
    data = _bytes_of(value)
    try:
        picture = _identify(data)
        width, height = picture.size
        if width * height > max_pixels:
            raise InputError(_too_large(f"{width}x{height} = {width * height:,}", max_pixels))
        picture.load()  # decodes every pixel now, so a truncated file fails here
    except UnidentifiedImageError as exc:
        raise InputError(f"{_size(data)} are not an image Pillow can read (PNG, JPEG, WebP...)") from exc
    except Image.DecompressionBombError as exc:
        # Raised by a format's reader that runs the guard on a size of its own (a GIF frame's extent).
        limit = 2 * (Image.MAX_IMAGE_PIXELS or PILLOW_LIMIT)
        raise InputError(_too_large(f"over {limit:,}", max_pixels)) from exc
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(
            f"image cannot be decoded ({type(exc).__name__}: {exc}); the file is damaged"
        ) from exc
    return to_rgb(ImageOps.exif_transpose(picture))


def _too_large(pixels: str, max_pixels: int) -> str:
    """The one message for a picture over ``max_pixels`` (the docs quote it: docs/how-to/images.md)."""
    return (
        f"image is {pixels} pixels, over the limit of {max_pixels:,}; resize it, or raise the model's "
        "max_pixels"
    )


def _identify(data: bytes) -> ImageFile.ImageFile:
    """The picture in ``data``, its header read and no pixel decoded: ``Image.open`` without its guard.

    ``Image.open`` tries each registered format's reader (``Image.ID``, filled
    by ``Image.register_open``) whose ``accept`` takes the first 16 bytes, the
    common formats first (``Image.preinit``), then every one (``Image.init``),
    and runs the decompression-bomb check on the size it read: a warning on
    stderr over ``MAX_IMAGE_PIXELS``, an error over twice that. This is the same
    search, in the same order, without that check: :func:`decode` compares the
    size with ``max_pixels`` (never above the guard) before it decodes a
    pixel, and says so in its own words. Nothing is changed in Pillow, so
    every other ``Image.open`` in the process keeps the guard.
    """
    fp, prefix, tried = io.BytesIO(data), data[:16], set[str]()
    for load_formats in (Image.preinit, Image.init):
        load_formats()
        for name in [f for f in Image.ID if f not in tried]:
            tried.add(name)
            factory, accept = Image.OPEN[name]
            accepted = accept is None or accept(prefix)
            if not accepted or isinstance(accepted, str):
                continue  # not this format (a str: a format Pillow knows but cannot read)
            fp.seek(0)
            try:
                return factory(fp, "")
            except (SyntaxError, IndexError, TypeError, struct.error):
                continue  # what Image.open takes to mean "another format's file"
    raise UnidentifiedImageError("cannot identify image file")


def to_rgb(picture: Image.Image) -> Image.Image:
    """``picture`` in RGB; one with transparency is composited on white (see the module docstring)."""
    if picture.mode == "RGB":
        return picture
    transparent = picture.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in picture.info
    if not transparent:
        return picture.convert("RGB")
    rgba = picture.convert("RGBA")
    background = Image.new("RGBA", rgba.size, (*WHITE, 255))
    return Image.alpha_composite(background, rgba).convert("RGB")


def _bytes_of(value: object) -> bytes:
    if isinstance(value, BinaryValue):
        if value.error is not None:
            raise InputError(f"image {value.origin}: {value.error}")
        if value.data is None:
            raise InputError(f"image {value.origin}: the source gave no bytes and no reason")
        value = value.data
    if isinstance(value, bytearray | memoryview):
        value = bytes(value)
    if not isinstance(value, bytes):
        raise InputError(
            f"an image model takes image bytes or an BinaryValue, got {type(value).__name__}; "
            "give the model a binary column's bytes (PNG, JPEG, WebP...)"
        )
    if not value:
        raise InputError("image is empty (0 bytes)")
    return value


def _size(data: bytes) -> str:
    return f"{len(data):,} bytes"
