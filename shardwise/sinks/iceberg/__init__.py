"""Results in an Apache Iceberg table (pyiceberg, no JVM) in a SQL catalog, its files in a warehouse.

``--results LOCATION`` is the warehouse: a local directory or ``s3://bucket/prefix``, under which the
catalog puts the table's data and metadata files. ``--results-table namespace.table`` names the table in
the catalog (a bare name is in namespace ``shardwise``). ``--iceberg-catalog URL`` is the catalog: a
SQLAlchemy URL of a PostgreSQL (``postgresql+psycopg://``, psycopg 3, which Shardwise depends on already)
or SQLite database, where pyiceberg's SQL catalog keeps each table's current metadata file.

**The default catalog.** For a local warehouse, an SQLite file in it, ``shardwise_iceberg_catalog.db``.
For an ``s3://`` warehouse there is no default: an SQLite file cannot live on S3, and one on the machine
that started the run would not be seen by workers elsewhere, each of which would make a catalog of its
own and so a table of its own. Such a run is refused in one line before anything runs, asking for
``--iceberg-catalog`` (a PostgreSQL database every worker reaches, or an SQLite file on a shared disk).

:mod:`.catalog` opens the catalog and the table, :mod:`.commits` reads a shard's chunk commits back from
the table's snapshots, and :mod:`.sink` writes the table. This module is the kind's registry entry; it
imports no ``pyiceberg``, so the kind is listed where the ``iceberg`` extra is missing, and refused when
chosen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from shardwise.errors import ConfigError
from shardwise.sinks.iceberg.catalog import DEFAULT_CATALOG_FILE, DEFAULT_NAMESPACE, catalog_url, table_name
from shardwise.sinks.location import LocationKind, check_local
from shardwise.sinks.registry import Destination, SinkOptions

if TYPE_CHECKING:
    from shardwise.retry_policy import RetryPolicy
    from shardwise.sinks.base import Layout, Sink

__all__ = ["DEFAULT_CATALOG_FILE", "DEFAULT_NAMESPACE", "KIND", "IcebergKind", "IcebergOptions", "table_name"]


class IcebergOptions(SinkOptions):
    """An Iceberg table's own option: the catalog that names it."""

    iceberg_catalog: str | None = Field(
        None,
        description="The Iceberg catalog: a SQL catalog as a SQLAlchemy URL, PostgreSQL "
        "(postgresql+psycopg://user@host/db) or SQLite (sqlite:///path/catalog.db). Default: an SQLite "
        f"catalog file {DEFAULT_CATALOG_FILE} in a local warehouse; required for an s3:// warehouse. "
        "No password in it: the URL is stored with the run's parameters; let the workers' environment "
        "give it (PGPASSWORD, a .pgpass file).",
    )

    @field_validator("iceberg_catalog")
    @classmethod
    def _no_password(cls, url: str | None) -> str | None:
        """The catalog URL travels in the run's parameters and spec, so it may not hold a secret."""
        from shardwise.secrets.redact import has_password

        if url is not None and has_password(url):
            raise ValueError(
                "the catalog URL holds a password, which would be stored with the run's parameters; drop "
                "it from the URL and give it in the workers' environment (PGPASSWORD, or a .pgpass file)"
            )
        return url


class IcebergKind(LocationKind):
    """Results in an Iceberg table ``namespace.table`` of a SQL catalog: one snapshot per chunk, once."""

    name = "iceberg"
    label = "an Apache Iceberg table"
    extra = "iceberg"
    options = IcebergOptions

    def require(self) -> None:
        try:
            import pyiceberg.catalog.sql
            import pyiceberg.io.pyarrow  # noqa: F401
        except ImportError as exc:
            raise ConfigError(
                f"results in Apache Iceberg need the pyiceberg package ({exc}); pip install "
                "'shardwise[iceberg]', or give --results-format delta"
            ) from exc

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
