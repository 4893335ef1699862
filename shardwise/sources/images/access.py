"""Which image references a source may read, and how much of each: the operator's rules, as plain data.

Whoever can write a row into a source chooses the references in its image
column, so a reference is read only where the operator said it may be:

* **Local paths and ``file://`` URIs** only under the declared ``roots``
  (``--image-root DIR``, ``SHARDWISE_IMAGE_ROOTS``), checked after symlinks
  and ``..`` are resolved; with none declared, no local reference is read. An
  image folder source reads its own folder as if it were declared (see
  :mod:`shardwise.sources.images.folder`). Files under ``/proc``, ``/sys`` and
  ``/dev`` are never read, whatever the roots, and only regular files are (see
  :mod:`shardwise.sources.images.local_read`).
* **``s3://`` references** only in the source's own bucket (a source on S3)
  or a bucket of ``buckets`` (``--image-bucket NAME``,
  ``SHARDWISE_IMAGE_BUCKETS``).
* **Every read** stops at ``max_bytes`` and ``read_timeout_s``
  (:func:`shardwise.sources.images.capped.read_capped`).

A reference refused by these rules is never opened or fetched: its row's
:class:`~shardwise.model.binary_value.BinaryValue` holds only the reason, so its dead
letter stores the reason and no fingerprint. The engine reads no environment:
the flow layer builds an :class:`ImageAccess` from the options and the
environment of the process that runs the flow, and it travels to the workers
inside the run's spec.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from shardwise.errors import ConfigError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_READ_TIMEOUT_S",
    "MAX_MAX_BYTES",
    "SYSTEM_FOLDERS",
    "ImageAccess",
    "check_bucket_name",
    "check_root",
]

DEFAULT_MAX_BYTES = 64 * 2**20
"""The most bytes read for one image by default: 64 MiB, several times a camera's largest JPEG."""
MAX_MAX_BYTES = 2**30
"""The largest ``max_bytes`` allowed: 1 GiB, PostgreSQL's largest ``bytea`` value."""
DEFAULT_READ_TIMEOUT_S = 60.0
"""Seconds one image read may take: a 64 MiB object over a slow link, with room to spare."""
SYSTEM_FOLDERS = ("/proc", "/sys", "/dev")
"""Folders of the kernel's own files (``/proc/self/environ``, devices): never read, whatever the roots."""

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def check_root(root: object) -> str:
    """``root`` if it is an absolute folder path outside :data:`SYSTEM_FOLDERS`, else a ConfigError.

    Only the spelling is checked here: whether it exists is the host's to say, where it is read.
    """
    if not isinstance(root, str) or not root.strip() or "\x00" in root:
        raise ConfigError(f"an image root must be a folder's path; got {root!r}")
    if not os.path.isabs(root):
        raise ConfigError(
            f"image root {root!r} is a relative path; give an absolute folder (--image-root makes a "
            "relative one absolute from the directory it is typed in)"
        )
    if in_system_folder(os.path.normpath(root)):
        raise ConfigError(
            f"image root {root!r} is in {', '.join(SYSTEM_FOLDERS)}, whose files are the kernel's, never "
            "pictures; declare the folder that holds the pictures"
        )
    return root


def check_bucket_name(name: object) -> str:
    """``name`` if it is an S3 bucket's name (3-63 lowercase letters, digits, dots, hyphens), else refused."""
    if not isinstance(name, str) or not _BUCKET.fullmatch(name):
        raise ConfigError(
            f"image bucket {name!r} is not an S3 bucket name (3 to 63 lowercase letters, digits, dots and "
            "hyphens); give the bucket's name alone, as in --image-bucket photos"
        )
    return name


def in_system_folder(path: str) -> bool:
    """Whether the absolute, normalised ``path`` is one of :data:`SYSTEM_FOLDERS` or inside one."""
    return any(path == top or path.startswith(top + os.sep) for top in SYSTEM_FOLDERS)


@dataclass(frozen=True)
class ImageAccess:
    """The references an image column may read and the limits of each read; checks itself."""

    roots: tuple[str, ...] = ()
    """Absolute folders local references may name; resolved (symlinks) on the host that reads."""
    buckets: tuple[str, ...] = ()
    """S3 buckets ``s3://`` references may name, besides the source's own."""
    max_bytes: int = DEFAULT_MAX_BYTES
    """The most bytes read for one image; a larger file or object is refused, read no further."""
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    """Seconds one image read may take before its row is refused."""

    def __post_init__(self) -> None:
        # A list (a form's JSON, pydantic) becomes a tuple: the spec that holds this is hashed.
        for name in ("roots", "buckets"):
            value = getattr(self, name)
            if isinstance(value, str) or not isinstance(value, (tuple, list)):
                raise ConfigError(f"image access {name} must be a list of names; got {value!r}")
            object.__setattr__(self, name, tuple(dict.fromkeys(value)))
        for root in self.roots:
            check_root(root)
        for bucket in self.buckets:
            check_bucket_name(bucket)
        size = self.max_bytes
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_MAX_BYTES:
            raise ConfigError(
                f"image max_bytes must be a whole number of bytes from 1 to {MAX_MAX_BYTES:,} (1 GiB); got "
                f"{size!r}. The default is {DEFAULT_MAX_BYTES:,} (64 MiB)"
            )
        timeout = self.read_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ConfigError(f"image read_timeout_s must be a positive number of seconds; got {timeout!r}")

    def with_root(self, root: str) -> ImageAccess:
        """These rules with ``root`` declared too (an image folder's own folder)."""
        return ImageAccess((*self.roots, root), self.buckets, self.max_bytes, self.read_timeout_s)

    def bucket_refusal(self, bucket: str, own: str | None) -> str | None:
        """Why an ``s3://`` reference into ``bucket`` may not be fetched, or None when it may.

        ``own`` is the source's own bucket (a source on S3), else None.
        """
        if bucket == own or bucket in self.buckets:
            return None
        listed = f" ({', '.join(self.buckets)})" if self.buckets else " (none is)"
        if own:
            rule = f"neither the source's own bucket {own!r} nor an allowed image bucket{listed}"
        else:
            rule = f"not an allowed image bucket{listed}, and a source not on S3 has no bucket of its own"
        flag = f"--image-bucket {bucket}" if _BUCKET.fullmatch(bucket) else "--image-bucket NAME"
        return (
            f"refused: bucket {bucket!r} is {rule}, so nothing was fetched; allow it with {flag} (or "
            "SHARDWISE_IMAGE_BUCKETS), or fix the reference"
        )
