"""A folder of images as a source: each image file (or S3 object) under a location is one row.

``location`` is a local folder (walked recursively), a local glob or file, or
``s3://bucket/prefix``. Its image objects, chosen by extension (``.jpg
.jpeg .png .webp .gif .bmp .tif .tiff``, any case), are the rows: the key is
the object's key relative to the location (text, ``cats/1.jpg``), the value an
:class:`~shardwise.model.binary_value.BinaryValue` of its bytes, fetched as the shard
is read. Other names are ignored and counted in the plan's ``ignored_objects``.

**When a location is an image folder** (:func:`shardwise.sources.open_source`):
a non-SQL location given *without* an image column whose listing holds image
objects and no Parquet objects. With ``--image-column`` it is a Parquet
dataset whose column holds the images; a listing holding both Parquet and
image objects without ``--image-column`` is refused as ambiguous.

The plan is an ``images`` plan that reads objects (``SourcePlan.by_objects``)
whose shards use the Parquet span bounds, one span per object (``row_groups``
``[0, 1]``): sorted objects cut into runs, the snapshot the listing's digest.
So only-new (the ledger's seen (key, ETag) pairs) and
:func:`~shardwise.sources.plan_objects` work as for Parquet. A resumed shard
skips its first ``ReadFrom.rows`` objects. An object deleted or replaced after
planning (its ETag changed) is that row's error, a dead letter; see
:mod:`~shardwise.sources.images.folder_fetch`.

**What is read.** A local folder is this source's own image root: its files
are read without ``--image-root``, but only those that are regular files
under it once symlinks are resolved (a symlink in the folder that points out
of it, unless into a declared root, or a FIFO named ``x.png``, is a dead
letter, nothing read). Every read stops at the run's byte cap and time bound
(:class:`~shardwise.sources.images.access.ImageAccess`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Sequence
from functools import partial
from typing import Any, ClassVar

from shardwise.model.binary_value import BinaryValue
from shardwise.retry_policy import RetryPolicy
from shardwise.sources.base import Key, NewOnly, Shard, SourcePlan, SourceRow, SourceValues
from shardwise.sources.files.objects import ObjectInfo, relative_key
from shardwise.sources.files.source import FileSource, is_new, new_only_params
from shardwise.sources.files.spans import RowGroup, shard_spans, to_shard
from shardwise.sources.images.access import ImageAccess
from shardwise.sources.images.column import DEFAULT_FETCH_THREADS, local_limit_s
from shardwise.sources.images.fetch_ahead import Fetch, fetched_in_order
from shardwise.sources.images.folder_fetch import fetch_local
from shardwise.sources.images.local_read import resolved_roots
from shardwise.sources.images.suffixes import IMAGE_SUFFIXES
from shardwise.sources.keyed import cut_runs
from shardwise.sources.sizing import Sizing

__all__ = ["ImageFolderSource", "own_folder"]


class ImageFolderSource(FileSource):
    """Plans and reads the image objects under a folder or S3 prefix; safe to share between threads."""

    kind = "images"
    suffixes: ClassVar[tuple[str, ...]] = IMAGE_SUFFIXES
    files: ClassVar[str] = "image objects"
    plan_fields: ClassVar[tuple[str, ...]] = ("images",)

    def __init__(
        self,
        location: str,
        *,
        s3_client: Any | None = None,
        retry: RetryPolicy | None = None,
        access: ImageAccess | None = None,
    ) -> None:
        super().__init__(location, s3_client, retry)
        self._access = access or ImageAccess()
        self._limit_s: float | None = None  # S3 reads are bounded by botocore and the retry deadline
        if self.identity.startswith("s3://"):
            from shardwise.sources.images.s3_get import fetch_s3  # imports botocore: only on S3

            self._fetch: Callable[[ObjectInfo], BinaryValue] = lambda obj: fetch_s3(
                self._store, obj, self._access
            )
        else:
            # The folder is this source's own root: its files are read as if it were declared.
            roots = resolved_roots((*self._access.roots, own_folder(self.identity)))
            self._fetch = lambda obj: fetch_local(obj, roots, self._access)
            self._limit_s = local_limit_s(self._access)

    @property
    def params(self) -> dict[str, Any]:
        """What this source reads: image objects, keyed by their text key relative to the location."""
        return {"location": self.identity, "images": True, "key_type": "text", "input_columns": []}

    def plan_sized(self, sizing: Sizing, new_only: NewOnly | None) -> SourcePlan:
        """Sorted image objects, those seen already left out with ``new_only``, cut into runs."""
        listing = self._list()
        planned = [o for o in listing.objects if is_new(o, new_only)]
        runs = cut_runs(planned, sizing.shards, sizing.rows_per_shard_for(len(planned)))
        shards = [to_shard(i, [RowGroup(o, 0, 1, 0) for o in run]) for i, run in enumerate(runs)]
        params = {
            **self.params,
            **sizing.params(len(planned)),
            "objects": len(planned),
            "rows": len(planned),
            "ignored_objects": listing.ignored,
            "skipped_objects": len(listing.objects) - len(planned),
            "new_only": new_only_params(new_only),
        }
        return self._plan(listing, shards, params)

    def _shard_rows(self, plan: SourcePlan, shard: Shard, skip: int) -> Generator[SourceRow, None, None]:
        """The shard's objects in key order, fetched a few ahead in a thread pool."""
        return self._rows([obj for obj, _, _ in shard_spans(shard)][skip:])

    def read_keys(self, keys: Sequence[Key]) -> Generator[SourceRow, None, None]:
        """The current objects whose relative key is in ``keys``, in key order; absent keys yield nothing."""
        wanted = {str(k) for k in keys}
        if wanted:
            yield from self._rows([o for o in self._list().objects if self._key(o) in wanted])

    def value_kind(self) -> SourceValues:
        """Pictures: every row is an image file."""
        return SourceValues("image", f"image folder {self.identity!r}", None)

    def _key(self, obj: ObjectInfo) -> str:
        return relative_key(self.identity, obj.key)

    def _rows(self, objects: Sequence[ObjectInfo]) -> Generator[SourceRow, None, None]:
        """One row per object, in order; closing the generator cancels the fetches not yet started."""
        items = (
            (self._key(obj), Fetch(partial(self._fetch, obj), obj.key, self._limit_s)) for obj in objects
        )
        fetched = fetched_in_order(items, threads=DEFAULT_FETCH_THREADS, name="shardwise-image-folder")
        try:
            for key, value in fetched:
                yield SourceRow(key, value)
        finally:
            fetched.close()


def own_folder(identity: str) -> str:
    """The folder a local image folder source reads under: the folder itself, a glob's fixed folder
    (``/data/photos`` for ``/data/photos/*.png``), or a single file's folder."""
    magic = [identity.index(c) for c in "*?[" if c in identity]
    if magic:
        return os.path.dirname(identity[: min(magic)])
    return identity if os.path.isdir(identity) else os.path.dirname(identity)
