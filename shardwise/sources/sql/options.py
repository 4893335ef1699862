"""The options a SQL source owns: a filter on its table, and how long one of its queries may run."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from shardwise.flags import Flag
from shardwise.sources.registry import SourceKindOptions
from shardwise.sources.sql.timeout import DEFAULT_QUERY_TIMEOUT_S

__all__ = ["SqlSourceOptions"]


class SqlSourceOptions(SourceKindOptions):
    """``--where`` and ``--query-timeout``: each is refused, unless at its default, for a source of
    another kind (files are read whole and run no query)."""

    where: Annotated[str | None, Flag(metavar="SQL")] = Field(
        None,
        description="Optional SQL filter on the source table: one boolean expression over its columns, "
        "checked by a SQL parser (no subqueries; an allow-list of functions; docs: how-to/where-filter.md).",
    )
    query_timeout_s: Annotated[float, Flag("--query-timeout", "SECONDS")] = Field(
        DEFAULT_QUERY_TIMEOUT_S,
        ge=0,
        allow_inf_nan=False,
        description="Seconds one query of a SQL source may run while planning, checking or reading a shard "
        "(PostgreSQL's statement_timeout, an interrupt on SQLite); a query that runs longer fails the "
        "planning or the shard, naming the limit, without retries. 0: no limit. A resume may raise it "
        "(docs: how-to/where-filter.md). Refused, unless the default, for a source that runs no query.",
    )
