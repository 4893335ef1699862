"""Which listed names are images, by extension (any case): light, as the ``images`` kind declares them."""

from __future__ import annotations

__all__ = ["IMAGE_SUFFIXES"]

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff")
