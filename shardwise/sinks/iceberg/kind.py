"""The ``iceberg`` sink kind's registry entry; it imports no ``pyiceberg``, so the kind is listed where the
``iceberg`` extra is missing, and refused when chosen."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardwise.errors import ConfigError
from shardwise.sinks.iceberg.catalog import catalog_url, table_name
from shardwise.sinks.iceberg.options import IcebergOptions
from shardwise.sinks.location import LocationKind, check_local, require_packages
from shardwise.sinks.registry import Destination, SinkOptions

if TYPE_CHECKING:
    from shardwise.retry_policy import RetryPolicy
    from shardwise.sinks.base import Layout, Sink

__all__ = ["KIND", "IcebergKind"]


class IcebergKind(LocationKind):
    """Results in an Iceberg table ``namespace.table`` of a SQL catalog: one snapshot per chunk, once."""

    name = "iceberg"
    label = "an Apache Iceberg table"
    extra = "iceberg"
    options = IcebergOptions

    def require(self) -> None:
        modules = ("pyiceberg.catalog.sql", "pyiceberg.io.pyarrow")
        require_packages(modules, "results in Apache Iceberg", "iceberg", "delta")

    def check(self, dest: Destination, options: SinkOptions) -> None:
        assert isinstance(options, IcebergOptions)
        table_name(dest.table)
        check_local(dest)
        if options.iceberg_catalog is None and dest.location.startswith("s3://"):
            raise ConfigError(
                f"results in Iceberg on {dest.given!r} need a catalog every worker reaches, and an s3:// "
                "warehouse holds no SQLite catalog file; give --iceberg-catalog "
                "postgresql+psycopg://user@host/db (or sqlite:///a/shared/disk/catalog.db)"
            )
        if options.iceberg_catalog is not None:
            catalog_url(options.iceberg_catalog, dest.location)

    def open(self, dest: Destination, layout: Layout, options: SinkOptions, retry: RetryPolicy) -> Sink:
        assert isinstance(options, IcebergOptions)
        self.require()
        from shardwise.sinks.iceberg.sink import IcebergSink

        return IcebergSink(dest.location, dest.table, layout, catalog=options.iceberg_catalog, retry=retry)


KIND = IcebergKind()
"""The ``iceberg`` entry of the ``shardwise.sinks`` entry-point group."""
