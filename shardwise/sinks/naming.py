"""The names every sink follows: a results table's name, and its columns (the key, the model's outputs,
the lineage columns). Names that Shardwise's own tables hold are reserved, since the ledger and the SQL
sink's tables may share the results' database.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from shardwise.errors import ConfigError
from shardwise.results.schema import LEDGER_TABLES

if TYPE_CHECKING:
    from shardwise.model import OutputColumn

__all__ = ["LINEAGE_COLUMNS", "SINK_TABLES", "STAGE_TABLE", "check_outputs", "parse_table_name"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
STAGE_TABLE = "shardwise_stage"
SINK_TABLES = ("shardwise_commits", "shardwise_tables")
"""The SQL sink's own tables, in the results database (see ``sql/common/sink_commits_schema.sql``)."""
_RESERVED = {*LEDGER_TABLES, *SINK_TABLES, STAGE_TABLE, "shardwise_watch_state"}
LINEAGE_COLUMNS = (
    "truncated",
    "model_name",
    "model_version",
    "input_fingerprint",
    "code_version",
    "input_snapshot",
    "run_id",
    "shard_id",
    "scored_at",
)
_FIXED = {"source_key", *LINEAGE_COLUMNS}


def parse_table_name(name: str) -> tuple[str | None, str]:
    """``table`` or ``schema.table`` as (schema, table), each a plain identifier."""
    parts = name.split(".") if isinstance(name, str) else []
    if not 1 <= len(parts) <= 2 or not all(_IDENT.match(p) for p in parts):
        raise ConfigError(
            f"results table name {name!r} is not an identifier; use letters, digits and underscores, "
            "starting with a letter or underscore, at most 63 characters, optionally schema.table "
            "(for example docs_embeddings or analytics.docs_embeddings)"
        )
    if parts[-1].lower() in _RESERVED:
        raise ConfigError(
            f"results table name {name!r} is reserved for Shardwise's own tables "
            f"({', '.join(sorted(_RESERVED))}); choose another --results-table"
        )
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


def check_outputs(outputs: tuple[OutputColumn, ...]) -> None:
    """The model's outputs can be columns beside the key and lineage, in every sink."""
    if not outputs:
        raise ConfigError("results need at least one model output column; the model declares none")
    seen: set[str] = set()
    for out in outputs:
        if not _IDENT.match(out.name) or out.name.lower() in _FIXED or out.name.lower() in seen:
            raise ConfigError(
                f"output column name {out.name!r} is invalid or taken; output names must be unique "
                f"identifiers and not one of: {', '.join(sorted(_FIXED))}"
            )
        if out.kind == "vector" and (out.dim is None or out.dim < 1):
            raise ConfigError(f"vector output {out.name!r} needs a positive dim; got {out.dim!r}")
        seen.add(out.name.lower())
