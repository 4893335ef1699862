"""What every file source kind shares: listing a local folder, glob or file or an S3 prefix, with ETags
(``objects``, ``local``, ``s3``, ``stores``), S3's errors mapped at the boundary (``s3_errors``), shards
as spans of row groups (``spans``), and the base of a file source (``source``): see
:class:`~shardwise.sources.files.source.FileSource`.

Parquet, CSV and JSON Lines and image folders each implement the read of one file on top of it; the
object watcher and the lake sinks use its stores and error mapping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardwise.lazy import lazy_exports

if TYPE_CHECKING:
    from shardwise.sources.files.objects import Listing, ObjectInfo, ObjectStore, listing_digest, relative_key
    from shardwise.sources.files.source import FileSource, one_key_type
    from shardwise.sources.files.spans import RowGroup, cut, plan_objects, shard_spans, to_shard
    from shardwise.sources.files.stores import open_store

__all__ = [
    "FileSource",
    "Listing",
    "ObjectInfo",
    "ObjectStore",
    "RowGroup",
    "cut",
    "listing_digest",
    "one_key_type",
    "open_store",
    "plan_objects",
    "relative_key",
    "shard_spans",
    "to_shard",
]

__getattr__ = lazy_exports(
    __name__,
    {
        ".objects": ("Listing", "ObjectInfo", "ObjectStore", "listing_digest", "relative_key"),
        ".source": ("FileSource", "one_key_type"),
        ".spans": ("RowGroup", "cut", "plan_objects", "shard_spans", "to_shard"),
        ".stores": ("open_store",),
    },
)
