"""A shard's chunk commits in a Delta table's own log: what makes :class:`~shardwise.sinks.delta.DeltaSink`
commit each chunk exactly once.

Each chunk's commit carries a Delta app transaction, ``(app_id(run, shard),
number + 1)``, and Shardwise's record of it (position, counts) in the
commit's custom metadata, so a retried chunk is recognised from the table
alone and answered with the record it committed.
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
    meta = {
        "app_id": app,
        "version": version,
        "position": dict(done.position),
        "counts": [done.inserted, done.updated, done.unchanged],
    }
    return CommitProperties(
        app_transactions=[Transaction(app, version)],
        custom_metadata={_META: json.dumps(meta, default=str)},
    )


def stored_commit(table: DeltaTable, app: str, version: int) -> SinkCommit | None:
    """The record of the commit that carried ``(app, version)``, from the table's history; None if gone."""
    for entry in table.history():
        raw = entry.get(_META)
        meta = json.loads(raw) if isinstance(raw, str) else None
        if meta and meta.get("app_id") == app and meta.get("version") == version:
            inserted, updated, unchanged = meta["counts"]
            return SinkCommit("already", meta["position"], inserted, updated, unchanged)
    return None
