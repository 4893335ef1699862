"""Results as Parquet files, locally or on S3: :mod:`.sink` writes one file per chunk, visible once
listed in the table's manifest, and :mod:`.leftovers` tidies what a killed writer left.

This module is the kind's registry entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardwise.sinks.location import check_local, location_target
from shardwise.sinks.registry import Destination, SinkOptions

if TYPE_CHECKING:
    from shardwise.model import OutputColumn
    from shardwise.retry_policy import RetryPolicy
    from shardwise.sinks.base import Layout, Sink

__all__ = ["KIND", "ParquetKind"]


class ParquetKind:
    """Results as Parquet files under ``LOCATION/TABLE``, one per chunk, listed in its ``_manifest``."""

    name = "parquet"
    label = "Parquet files"
    extra = None
    schemes: tuple[str, ...] = ()
    options = SinkOptions

    def require(self) -> None:
        """pyarrow is a core dependency."""

    def target(self, dest: Destination) -> str:
        return location_target(self.name, dest)

    def check(self, dest: Destination, options: SinkOptions) -> None:
        check_local(dest)

    def check_outputs(self, options: SinkOptions, model: str, outputs: tuple[OutputColumn, ...]) -> None:
        """Parquet stores every output kind."""

    def same_database(self, dest: Destination, url: str) -> bool:
        return False

    def open(self, dest: Destination, layout: Layout, options: SinkOptions, retry: RetryPolicy) -> Sink:
        from shardwise.sinks.parquet.sink import ParquetSink

        return ParquetSink(dest.location, dest.table, layout, retry=retry)


KIND = ParquetKind()
"""The ``parquet`` entry of the ``shardwise.sinks`` entry-point group."""
