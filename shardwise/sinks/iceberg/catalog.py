"""Where an Iceberg results table is and how it is reached: its SQL catalog and its warehouse.

pyiceberg's SQL catalog keeps, per table, a row naming the table's current
metadata file; a commit swaps that row's value only if it is still the one
the writer read (compare-and-swap), which is what makes each commit
exclusive (see :mod:`.sink`). Its files go under the warehouse, written
through pyiceberg's pyarrow file IO: locally, or on S3 with the settings of
boto3's chain (:func:`~shardwise.sinks.lake.s3_storage_options`), resolved
again each time the catalog is opened. Credentials appear in no message.

``pyiceberg`` is imported only when a catalog is opened, so the kind's
checks (:func:`catalog_url`) run where it is missing.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

import sqlalchemy as sa

from shardwise.db.timeouts import CONNECT_TIMEOUT_S
from shardwise.errors import ConfigError
from shardwise.secrets.redact import remember
from shardwise.secrets.url_syntax import refuse_unencoded
from shardwise.sinks.lake import S3Settings, s3_storage_options

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

__all__ = [
    "CATALOG_NAME",
    "DEFAULT_CATALOG_FILE",
    "DEFAULT_NAMESPACE",
    "catalog_url",
    "has_catalog_tables",
    "open_catalog",
    "table_name",
    "warehouse_uri",
]

CATALOG_NAME = "shardwise"
"""The catalog name pyiceberg stores with each table's row: one database may hold several catalogs."""
DEFAULT_NAMESPACE = "shardwise"
"""The namespace of a ``--results-table`` given without one."""
DEFAULT_CATALOG_FILE = "shardwise_iceberg_catalog.db"
"""The SQLite catalog made in a local warehouse when ``--iceberg-catalog`` is not given."""
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_DRIVERS = {"postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg"}
_KEPT = ("postgresql+psycopg", "sqlite", "sqlite+pysqlite")
_SQLITE_WAIT_S = "60"
"""How long an SQLite catalog waits for another writer's lock: commits of many shards queue on it."""
_S3_PROPERTIES = {
    "AWS_REGION": "s3.region",
    "AWS_ENDPOINT_URL": "s3.endpoint",
    "AWS_ACCESS_KEY_ID": "s3.access-key-id",
    "AWS_SECRET_ACCESS_KEY": "s3.secret-access-key",
    "AWS_SESSION_TOKEN": "s3.session-token",
}


def table_name(table: str) -> tuple[str, str]:
    """``(namespace, table)`` of ``--results-table``: ``namespace.table``, or a bare ``table`` in
    :data:`DEFAULT_NAMESPACE`; each part a plain identifier."""
    namespace, _, name = table.rpartition(".")
    namespace = namespace or DEFAULT_NAMESPACE
    if not _IDENT.match(namespace) or not _IDENT.match(name):
        raise ConfigError(
            f"Iceberg table {table!r} is not namespace.table of plain identifiers; use letters, "
            "digits and underscores, for example analytics.docs_embeddings (a bare name is in "
            f"{DEFAULT_NAMESPACE!r})"
        )
    return namespace, name


def catalog_url(given: str | None, location: str) -> str:
    """The catalog's SQLAlchemy URL: ``given`` checked (PostgreSQL through psycopg 3, or an SQLite
    file), or, for a local warehouse, the SQLite file :data:`DEFAULT_CATALOG_FILE` in it."""
    if given is None:
        if location.startswith("s3://"):
            raise ConfigError(
                "an s3:// warehouse has no default Iceberg catalog; give --iceberg-catalog "
                "postgresql+psycopg://user@host/db"
            )
        path = os.path.join(os.path.abspath(location), DEFAULT_CATALOG_FILE)
        return sa.URL.create("sqlite", database=path, query={"timeout": _SQLITE_WAIT_S}).render_as_string()
    refuse_unencoded(given, "the Iceberg catalog URL (--iceberg-catalog)")
    try:
        parsed = sa.make_url(given)
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise ConfigError(
            "iceberg_catalog is not a SQLAlchemy URL; give --iceberg-catalog "
            "postgresql+psycopg://user@host/db or sqlite:///path/to/catalog.db"
        ) from exc
    remember(parsed.password)  # masked in every later message
    parsed = parsed.set(drivername=_DRIVERS.get(parsed.drivername, parsed.drivername))
    shown = parsed.render_as_string(hide_password=True)
    if parsed.drivername not in _KEPT:
        raise ConfigError(
            f"iceberg_catalog {shown!r} uses driver {parsed.drivername!r}; a SQL catalog here is "
            "postgresql+psycopg://user@host/db (psycopg 3) or sqlite:///path/to/catalog.db"
        )
    if parsed.drivername.startswith("sqlite"):
        if parsed.database in (None, "", ":memory:") or "mode=memory" in str(parsed.query):
            raise ConfigError(
                f"iceberg_catalog {shown!r} is an SQLite database in memory, which no other process "
                "sees; give a file: sqlite:///path/to/catalog.db"
            )
        if "timeout" not in parsed.query:
            parsed = parsed.update_query_dict({"timeout": _SQLITE_WAIT_S})
    elif "connect_timeout" not in parsed.query:
        # A try at a host that does not answer is cut short, so the sink's retries check their deadline.
        parsed = parsed.update_query_dict({"connect_timeout": str(CONNECT_TIMEOUT_S)})
    return parsed.render_as_string(hide_password=False)


def warehouse_uri(location: str) -> str:
    """The warehouse as pyiceberg's file IO names it: ``s3://bucket/prefix`` or ``file:///abs/path``."""
    if location.startswith("s3://"):
        return location.rstrip("/")
    return "file://" + os.path.abspath(location)


def open_catalog(url: str, location: str, s3: S3Settings | None, *, create: bool) -> SqlCatalog:
    """The SQL catalog at ``url`` with its warehouse at ``location``; its own tables are made when
    ``create`` (idempotent; a race with another process making them is tried once more)."""
    from pyiceberg.catalog.sql import SqlCatalog

    properties = {
        "uri": url,
        "warehouse": warehouse_uri(location),
        "init_catalog_tables": "true" if create else "false",
        "pool_pre_ping": "true",
        "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
    }
    if location.startswith("s3://"):
        options = s3_storage_options(s3)
        properties.update({_S3_PROPERTIES[k]: v for k, v in options.items() if k in _S3_PROPERTIES})
    try:
        return SqlCatalog(CATALOG_NAME, **properties)
    except (sa.exc.IntegrityError, sa.exc.ProgrammingError):
        if not create:
            raise
        # Another process created the catalog's tables between this one's look and its CREATE.
        return SqlCatalog(CATALOG_NAME, **properties)


def has_catalog_tables(catalog: SqlCatalog) -> bool:
    """Whether the catalog's database holds pyiceberg's tables yet (a catalog nobody has written)."""
    return bool(sa.inspect(catalog.engine).has_table("iceberg_tables"))
