"""The ledger's schema version, and the check that an existing ledger has it.

The fixed-name ledger tables are created from ``sql/common/ledger_schema.sql``,
with their layout's version (:data:`LEDGER_SCHEMA_VERSION`) in
``shardwise_schema``. A ledger of another version is refused, never altered:
nothing was released before version 1, so no build upgrades a ledger.

Until version 1 is released its layout may still gain tables, and keeps its
number when it does: every statement of ``ledger_schema.sql`` is idempotent,
so a ledger made by an earlier build of version 1 gets a new table (say
``shardwise_provider_batches``) the next time a run ensures it. A change to
an existing table's columns, or any change once version 1 is out, is a new
version.
"""

from __future__ import annotations

from collections.abc import Sequence

from shardwise.errors import ConfigError

__all__ = [
    "LEDGER_SCHEMA_VERSION",
    "LEDGER_TABLES",
    "VERSION_TABLE",
    "check_ledger_version",
]

LEDGER_SCHEMA_VERSION = 1
"""The layout of the ledger tables this build creates and reads; a ledger records it when created."""
VERSION_TABLE = "shardwise_schema"
LEDGER_TABLES = (
    VERSION_TABLE,
    "shardwise_runs",
    "shardwise_shards",
    "shardwise_chunks",
    "shardwise_errors",
    "shardwise_objects",
    "shardwise_shard_transitions",
    "shardwise_provider_batches",
    "shardwise_chunk_usage",
    "shardwise_budget_holds",
    "shardwise_run_budgets",
)


def check_ledger_version(shown: str, found: Sequence[int]) -> None:
    """Refuse a ledger whose tables exist but whose recorded schema version (``found``, the rows of
    ``shardwise_schema``; none when a build before versions made it) is not this build's."""
    if list(found) == [LEDGER_SCHEMA_VERSION]:
        return
    if not found:
        what = "has no schema version (an older build of shardwise made it)"
    else:
        what = f"has schema version {', '.join(str(v) for v in found)}"
    fix = (
        "start a new one: give --ledger a new database URL or SQLite file, or drop the shardwise_* "
        "tables there"
    )
    if found and max(found) > LEDGER_SCHEMA_VERSION:
        fix = f"use the newer shardwise that made it, or {fix}"
    raise ConfigError(
        f"the ledger {shown} {what}, and this build needs schema version {LEDGER_SCHEMA_VERSION} (it "
        f"upgrades no ledger); {fix}"
    )
