"""A shard's chunk commits in an Iceberg table's own snapshots: what makes
:class:`~shardwise.sinks.iceberg.sink.IcebergSink` commit each chunk exactly once.

The snapshot that commits a chunk carries, in its summary, the shard it
belongs to (``shardwise.shard``: ``<run_id>:<shard_id>``), the chunk's
number (``shardwise.chunk``) and Shardwise's record of it
(``shardwise.record``: position and merge counts, JSON). A shard's seal is
an empty snapshot at the next chunk's number whose record says
``"sealed": true``. A shard's chunks commit in order, so a chunk has landed
exactly when the shard's highest number among the table's snapshots is at
least its own; the record is then the one stored at its number.

Only the current snapshot's ancestors count: a snapshot that a rollback took
off the table no longer holds its rows, so its chunk has not landed.
Expiring snapshots (table maintenance) drops their records too: expire only
those of runs that will not be resumed.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from shardwise.sinks.base import SinkCommit

if TYPE_CHECKING:
    from pyiceberg.table import Table

__all__ = ["landed", "shard_id_of", "snapshot_properties"]

_SHARD = "shardwise.shard"
_CHUNK = "shardwise.chunk"
_RECORD = "shardwise.record"


def shard_id_of(run_id: str, shard_id: int) -> str:
    """What a shard's snapshots carry as ``shardwise.shard``."""
    return f"{run_id}:{shard_id}"


def snapshot_properties(run_id: str, shard_id: int, number: int, done: SinkCommit) -> dict[str, str]:
    """The summary properties of the snapshot that commits chunk ``number`` (or seals the shard there)."""
    record: dict[str, object] = {
        "position": dict(done.position),
        "counts": [done.inserted, done.updated, done.unchanged],
    }
    if done.status == "sealed":
        record["sealed"] = True
    return {
        _SHARD: shard_id_of(run_id, shard_id),
        _CHUNK: str(number),
        _RECORD: json.dumps(record, default=str, sort_keys=True),
    }


def landed(table: Table, run_id: str, shard_id: int, number: int) -> SinkCommit | None:
    """The record of chunk ``number`` of the shard (``already``, or ``sealed`` where the shard was sealed
    at it), or None when the shard's commits stop below it."""
    from pyiceberg.table.snapshots import ancestors_of

    shard = shard_id_of(run_id, shard_id)
    highest, found = -1, None
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snapshot.summary
        if summary is None or summary.get(_SHARD) != shard:
            continue
        at = int(summary.get(_CHUNK) or -1)
        highest = max(highest, at)
        if at == number:
            found = summary.get(_RECORD)
    if highest < number:
        return None
    if found is None:  # expired with its snapshot; the chunk has landed all the same
        return SinkCommit("already", {})
    record = json.loads(found)
    if record.get("sealed"):
        return SinkCommit("sealed", record["position"])
    inserted, updated, unchanged = record["counts"]
    return SinkCommit("already", record["position"], inserted, updated, unchanged)
