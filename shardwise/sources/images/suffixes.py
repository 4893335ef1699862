"""Which listed names are images: by their extension (any case), so that choosing them needs no I/O.

Light on purpose: the ``images`` kind declares these suffixes to the registry, which imports it to
match a location, and the image folder source lists by them.
"""

from __future__ import annotations

__all__ = ["IMAGE_SUFFIXES"]

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff")
