"""What every file source kind answers alike, as its kind: where its files are, and how they are watched.

A file kind (Parquet, CSV and JSON Lines, image folders, a plug-in's) subclasses :class:`FileKind`
beside its ``name``, ``suffixes`` and ``open``: a local path is on this host only, an ``s3://`` prefix
is reached from any host, and ``shardwise watch`` lists the location for new files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shardwise.sources.files.stores import on_this_host
from shardwise.sources.registry import SourceKindOptions

if TYPE_CHECKING:
    from shardwise.watch.events import Emitter
    from shardwise.watch.spec import WatchSpec
    from shardwise.watch.watcher import Seen, Watcher

__all__ = ["FileKind"]


class FileKind:
    """What every source kind of files answers alike (:class:`~shardwise.sources.registry.SourceKind`):
    no database scheme, no extra beyond the core, each file a table of rows, no options of its own."""

    extra: str | None = None
    schemes: tuple[str, ...] = ()
    whole_files: bool = False
    options: type[SourceKindOptions] = SourceKindOptions

    def on_this_host(self, location: str) -> bool:
        return on_this_host(location)

    def watcher(self, spec: WatchSpec, emit: Emitter, *, seen: Seen | None = None, **options: Any) -> Watcher:
        from shardwise.watch.object_watcher import ObjectWatcher

        return ObjectWatcher(spec, emit, seen=seen, **options)
