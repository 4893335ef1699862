"""Watch a Parquet location (a local folder or glob, or an S3 prefix) for new or replaced objects.

:class:`ObjectWatcher` lists the location every ``spec.interval_s`` with the
file sources' own store (:func:`shardwise.sources.files.stores.open_store`), so
it sees exactly the objects and ETags a plan would. An object is *new* when
its (object key, ETag) pair is neither in ``seen()`` (the ledger's pairs:
already scored) nor already announced by this watcher. A re-upload changes
the ETag, so it is announced again.

Debounce: the new objects of one listing go into **one** event, whose payload
lists them (``objects``: key, etag, size; at most ``max_listed`` of them, with
``count`` the full number). Nothing is persisted: the ledger is the durable
record, so a restarted watcher announces once more only what is still
unscored, which an only-new run absorbs.
"""

from __future__ import annotations

from typing import Any

from shardwise.errors import ConfigError
from shardwise.secrets.by_reference import by_reference
from shardwise.sources.files.objects import ObjectInfo
from shardwise.sources.files.stores import open_store
from shardwise.sources.registry import file_suffixes
from shardwise.watch.events import Emitter
from shardwise.watch.loop import Backoff
from shardwise.watch.spec import WatchSpec
from shardwise.watch.watcher import Seen, Watcher

__all__ = ["ObjectWatcher"]


def _nothing_seen() -> frozenset[tuple[str, str]]:
    return frozenset()


class ObjectWatcher(Watcher):
    """Announces new Parquet or image objects under ``spec.source`` as events. Not thread-safe."""

    def __init__(
        self,
        spec: WatchSpec,
        emit: Emitter,
        *,
        seen: Seen | None = None,
        max_listed: int = 100,
        s3_client: Any | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        spec.check_location()
        if max_listed < 1:
            raise ConfigError(f"max_listed must be a positive integer; got {max_listed!r}")
        super().__init__(spec.name, emit, pause_s=spec.interval_s, backoff=backoff)
        # Parquet files, or pictures: an image folder is a source too (shardwise.sources.images.folder),
        # and the run an event starts refuses a folder that holds both.
        self._store = open_store(spec.source, s3_client, suffixes=file_suffixes())
        self._location = by_reference(spec.named_by, self._store.identity)  # what events name
        self._seen = seen or _nothing_seen
        self._max_listed = max_listed
        self._announced: set[tuple[str, str]] = set()

    @property
    def watching(self) -> str:
        return self._location

    def poll_once(self) -> int:
        """List once; announce the objects neither seen nor announced yet. Returns events emitted (0 or 1)."""
        listed = self._store.listing().objects
        known = self._seen() | self._announced
        new = [o for o in listed if (o.key, o.etag) not in known]
        if new:
            self._announce(self._payload(new))
        # Forget objects no longer listed, so the memory stays the size of one listing.
        listed_pairs = {(o.key, o.etag) for o in listed}
        self._announced = listed_pairs & (self._announced | {(o.key, o.etag) for o in new})
        return int(bool(new))

    def close(self) -> None:
        """Close the S3 client if the store created it."""
        self._store.close()

    def _payload(self, new: list[ObjectInfo]) -> dict[str, Any]:
        return {
            "location": self._location,
            "count": len(new),
            "bytes": sum(o.size for o in new),
            "objects": [{"key": o.key, "etag": o.etag, "size": o.size} for o in new[: self._max_listed]],
        }
