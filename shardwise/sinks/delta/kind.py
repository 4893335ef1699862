"""The ``delta`` sink kind's registry entry; it imports no ``deltalake``, so the kind is listed where
the ``delta`` extra is missing, and refused when chosen."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardwise.sinks.location import LocationKind, require_packages
from shardwise.sinks.registry import Destination, SinkOptions

if TYPE_CHECKING:
    from shardwise.retry_policy import RetryPolicy
    from shardwise.sinks.base import Layout, Sink

__all__ = ["KIND", "DeltaKind"]


class DeltaKind(LocationKind):
    """Results in a Delta table at ``LOCATION/TABLE``: one Delta commit per chunk, exactly once."""

    name = "delta"
    label = "a Delta Lake table"
    extra = "delta"
    options = SinkOptions

    def require(self) -> None:
        require_packages(("deltalake",), "results in Delta Lake", "delta", "parquet")

    def folder_marker(self) -> str | None:
        return "_delta_log/"  # the Delta log, which delta-rs writes at the table's root

    def open(self, dest: Destination, layout: Layout, options: SinkOptions, retry: RetryPolicy) -> Sink:
        self.require()
        from shardwise.sinks.delta.sink import DeltaSink

        return DeltaSink(dest.location, dest.table, layout, retry=retry)


KIND = DeltaKind()
"""The ``delta`` entry of the ``shardwise.sinks`` entry-point group."""
