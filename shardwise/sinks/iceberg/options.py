"""An Iceberg table's own option (``--iceberg-catalog``): the catalog that names it."""

from __future__ import annotations

from pydantic import Field, field_validator

from shardwise.sinks.iceberg.catalog import DEFAULT_CATALOG_FILE
from shardwise.sinks.registry import SinkOptions

__all__ = ["IcebergOptions"]


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
