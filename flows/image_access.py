"""The image references a run may read: its options, and the environment of the process that runs the flow.

The operator declares where an image column's references may point, as
options or in the environment of the process that runs the score flow (the
``shardwise`` command's own process, or a deployment's flow run on its work
pool's worker):

* ``SHARDWISE_IMAGE_ROOTS``: absolute folders, separated by ``:``, added to
  ``--image-root``;
* ``SHARDWISE_IMAGE_BUCKETS``: S3 bucket names, separated by ``:``, added to
  ``--image-bucket``.

They are read here, in the flow layer (the engine reads no environment), into
one :class:`~shardwise.sources.images.ImageAccess` that travels to every
worker inside the run's spec: a shard worker's own environment is not read,
so every worker of a run reads by the same rules. Where the shards run on
this host, every root must be a folder here, or the run is refused before it
starts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from shardwise.errors import ConfigError
from shardwise.sources.images import ImageAccess

__all__ = ["IMAGE_BUCKETS_ENV", "IMAGE_ROOTS_ENV", "declared_access"]

IMAGE_ROOTS_ENV = "SHARDWISE_IMAGE_ROOTS"
IMAGE_BUCKETS_ENV = "SHARDWISE_IMAGE_BUCKETS"


def declared_access(
    roots: Sequence[str], buckets: Sequence[str], max_bytes: int, *, here: bool
) -> ImageAccess:
    """The run's :class:`ImageAccess`: ``roots`` and ``buckets`` as given, then the environment's.

    ``here``: the shards run on this host, so each root must be an existing folder of it.
    """
    from_env = _entries(IMAGE_ROOTS_ENV)
    for root in from_env:
        if not os.path.isabs(root):
            raise ConfigError(
                f"{IMAGE_ROOTS_ENV} holds {root!r}, a relative path; give absolute folders separated by ':'"
            )
    if here:
        _exist(roots, "--image-root")
        _exist(from_env, IMAGE_ROOTS_ENV)
    return ImageAccess(
        roots=(*roots, *from_env), buckets=(*buckets, *_entries(IMAGE_BUCKETS_ENV)), max_bytes=max_bytes
    )


def _entries(name: str) -> tuple[str, ...]:
    return tuple(part for part in os.environ.get(name, "").split(":") if part.strip())


def _exist(roots: Sequence[str], given_by: str) -> None:
    for root in roots:
        if not os.path.isdir(root):
            state = "is not a folder" if os.path.exists(root) else "does not exist"
            raise ConfigError(
                f"image root {root!r} ({given_by}) {state} on this host; give the folder that holds the "
                "pictures the image column names"
            )
