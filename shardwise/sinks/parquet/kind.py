"""The ``parquet`` sink kind's registry entry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardwise.sinks.location import LocationKind
from shardwise.sinks.registry import Destination, SinkOptions

if TYPE_CHECKING:
    from shardwise.retry_policy import RetryPolicy
    from shardwise.sinks.base import Layout, Sink

__all__ = ["KIND", "ParquetKind"]


class ParquetKind(LocationKind):
    """Results as Parquet files under ``LOCATION/TABLE``, one per chunk, listed in its ``_manifest``."""

    name = "parquet"
    label = "Parquet files"
    extra = None
    options = SinkOptions

    def require(self) -> None:
        """pyarrow is a core dependency."""

    def folder_marker(self) -> str | None:
        from shardwise.sinks.parquet.sink import SCHEMA_FILE

        return SCHEMA_FILE

    def open(self, dest: Destination, layout: Layout, options: SinkOptions, retry: RetryPolicy) -> Sink:
        from shardwise.sinks.parquet.sink import ParquetSink

        return ParquetSink(dest.location, dest.table, layout, retry=retry)


KIND = ParquetKind()
"""The ``parquet`` entry of the ``shardwise.sinks`` entry-point group."""
