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
the table's snapshots, and :mod:`.sink` writes the table. :mod:`.kind` is the
registry entry and :mod:`.options` its option.
"""

from __future__ import annotations

from shardwise.sinks.iceberg.catalog import DEFAULT_CATALOG_FILE, DEFAULT_NAMESPACE, table_name
from shardwise.sinks.iceberg.kind import KIND, IcebergKind
from shardwise.sinks.iceberg.options import IcebergOptions

__all__ = ["DEFAULT_CATALOG_FILE", "DEFAULT_NAMESPACE", "KIND", "IcebergKind", "IcebergOptions", "table_name"]
