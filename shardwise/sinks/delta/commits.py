"""A shard's chunk commits in a Delta table's own log: what makes :class:`~.sink.DeltaSink`
commit each chunk exactly once.

Each chunk's commit carries a Delta app transaction, ``(app_id(run, shard),
number + 1)``, and Shardwise's record of it (position, counts) in the
commit's custom metadata, so a retried chunk is recognised from the table
alone and answered with the record it committed. A shard's seal is an empty
commit that takes the next chunk's version, its record marked
``"sealed": true``: a chunk found there is answered ``sealed``.
"""

from __future__ import annotations

import json

from deltalake import CommitProperties, DeltaTable, Transaction

from shardwise.sinks.base import SinkCommit

__all__ = ["app_id", "commit_properties", "stored_commit"]

_META = "shardwise"


def app_id(run_id: str, shard_id: int) -> str:
    """The Delta app transaction id of one shard of one run; its version counts committed chunks."""
    return f"shardwise:{run_id}:{shard_id}"


def commit_properties(app: str, version: int, done: SinkCommit) -> CommitProperties:
    """The commit's app transaction ``(app, version)`` and Shardwise's record of it, ``done``."""
    meta: dict[str, object] = {
        "app_id": app,
        "version": version,
        "position": dict(done.position),
        "counts": [done.inserted, done.updated, done.unchanged],
    }
    if done.status == "sealed":
        meta["sealed"] = True
    return CommitProperties(
        app_transactions=[Transaction(app, version)],
        custom_metadata={_META: json.dumps(meta, default=str)},
    )


_RECENT = 64
"""How many of the newest commits are searched first: the one sought is almost always among them."""


def stored_commit(table: DeltaTable, app: str, version: int) -> SinkCommit | None:
    """The record of the commit that carried ``(app, version)``, from the table's history; None if gone.

    The rare path (a retried, raced or stale commit). delta-rs holds Python's GIL while it reads the
    history (measured on deltalake 1.6: other threads stall for the whole read), so the newest
    :data:`_RECENT` commits are read first, and the whole history only when the commit is older.
    """
    found = _search(table.history(_RECENT), app, version)
    if found is None and table.version() + 1 > _RECENT:
        found = _search(table.history(), app, version)
    return found


def _search(history: list[dict[str, object]], app: str, version: int) -> SinkCommit | None:
    for entry in history:
        raw = entry.get(_META)
        meta = json.loads(raw) if isinstance(raw, str) else None
        if meta and meta.get("app_id") == app and meta.get("version") == version:
            inserted, updated, unchanged = meta["counts"]
            if meta.get("sealed"):
                return SinkCommit("sealed", meta["position"])
            return SinkCommit("already", meta["position"], inserted, updated, unchanged)
    return None
