"""The results table's layout, built in code, and the check that an existing table matches it; the
ledger's schema version, and the check that an existing ledger has it.

The results table is named by the user and its columns follow the model's
outputs, so it is a ``sa.Table`` (SQLAlchemy quotes every identifier). The
fixed-name ledger tables are created from ``sql/common/ledger_schema.sql``,
with their layout's version (:data:`LEDGER_SCHEMA_VERSION`) in
``shardwise_schema``. A ledger of another version is refused, never altered:
nothing was released before version 1, so no build upgrades a ledger.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from shardwise.errors import ConfigError
from shardwise.model import OutputColumn
from shardwise.results.codec import Float32Vector, UtcTimestamp
from shardwise.sources.base import KeyType

__all__ = [
    "LEDGER_SCHEMA_VERSION",
    "LEDGER_TABLES",
    "LINEAGE_COLUMNS",
    "SINK_TABLES",
    "STAGE_TABLE",
    "VERSION_TABLE",
    "VectorStorage",
    "check_layout",
    "check_ledger_version",
    "check_outputs",
    "expected_layout",
    "parse_table_name",
    "results_table",
    "stage_table",
]

VectorStorage = Literal["array", "vector", "halfvec"]
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
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
)
STAGE_TABLE = "shardwise_stage"
SINK_TABLES = ("shardwise_commits",)
"""The SQL sink's own table, in the results database (see ``sql/common/sink_commits_schema.sql``)."""
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


def _output_type(out: OutputColumn, vectors: VectorStorage) -> sa.types.TypeEngine[Any]:
    if out.kind == "vector" and vectors != "array":
        from shardwise.sinks.pgvector import HalfVec, Vector

        return Vector(out.dim) if vectors == "vector" else HalfVec(out.dim)
    kinds: dict[str, sa.types.TypeEngine[Any]] = {
        "vector": Float32Vector(),
        "float": sa.Double(),
        "int": sa.BigInteger(),
        "text": sa.Text(),
        "json": sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
    }
    return kinds[out.kind]


def _key_type(key_type: KeyType) -> sa.types.TypeEngine[Any]:
    return sa.BigInteger() if key_type == "int" else sa.Text()


def results_table(
    name: str, outputs: tuple[OutputColumn, ...], key_type: KeyType, vectors: VectorStorage = "array"
) -> sa.Table:
    """The results table: key, one column per output, lineage; primary key (source_key, model_version).

    ``vectors`` is how vector outputs are stored: ``real[]`` (``array``; a BLOB on SQLite), or
    pgvector's ``vector(dim)``/``halfvec(dim)`` (see :mod:`shardwise.sinks.pgvector`).
    """
    schema, table = parse_table_name(name)
    check_outputs(outputs)
    return sa.Table(
        table,
        sa.MetaData(),
        sa.Column("source_key", _key_type(key_type), nullable=False),
        *(sa.Column(out.name, _output_type(out, vectors), nullable=True) for out in outputs),
        sa.Column("truncated", sa.Boolean(), nullable=False),
        sa.Column("model_name", sa.Text(), nullable=False),
        sa.Column("model_version", sa.Text(), nullable=False),
        sa.Column("input_fingerprint", sa.Text(), nullable=False),
        sa.Column("code_version", sa.Text(), nullable=False),
        sa.Column("input_snapshot", sa.Text(), nullable=True),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("shard_id", sa.Integer(), nullable=False),
        sa.Column("scored_at", UtcTimestamp(), nullable=False),
        sa.PrimaryKeyConstraint("source_key", "model_version"),
        schema=schema,
    )


def stage_table(results: sa.Table) -> sa.Table:
    """A connection-private TEMPORARY table holding one shard's rows until its merge.

    ``seq`` records arrival order, so a key staged twice keeps its last value.
    """
    copied = [
        sa.Column(col.name, col.type, nullable=True)
        for col in results.columns
        if col.name not in LINEAGE_COLUMNS or col.name in ("truncated", "input_fingerprint")
    ]
    return sa.Table(
        STAGE_TABLE,
        sa.MetaData(),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        *copied,
        prefixes=["TEMPORARY"],
    )


def _family(t: sa.types.TypeEngine[Any]) -> str:
    """A type's storage family, coarse enough to compare a reflected type with a declared one."""
    if isinstance(t, sa.ARRAY):
        return _family(t.item_type) + "[]"
    checks: tuple[tuple[type[Any], str], ...] = (
        (sa.LargeBinary, "bytes"),
        (sa.Boolean, "bool"),
        (sa.Integer, "int"),
        (sa.REAL, "real"),
        (sa.Float, "float"),
        (sa.DateTime, "timestamp"),
        (postgresql.JSONB, "jsonb"),
        (sa.JSON, "json"),
        (sa.String, "text"),
    )
    for cls, family in checks:
        if isinstance(t, cls):
            return family
    return type(t).__name__.lower()


def expected_layout(table: sa.Table, dialect: sa.Dialect) -> dict[str, str]:
    """Column name → storage family the dialect actually creates for ``table`` (pgvector's with dims)."""
    layout = {}
    for col in table.columns:
        if getattr(col.type, "type_name", None) in ("vector", "halfvec"):
            layout[col.name] = col.type.compile(dialect=dialect)
            continue
        impl = col.type.dialect_impl(dialect)
        if isinstance(impl, sa.types.TypeDecorator):
            impl = impl.load_dialect_impl(dialect)
        layout[col.name] = _family(impl)
    return layout


def check_layout(conn: sa.Connection, table: sa.Table, shown_name: str) -> None:
    """Raise ConfigError listing every difference between the existing table and ``table``."""
    from shardwise.sinks.pgvector import recognise_vector_types, reflected_vector_family

    recognise_vector_types(conn.dialect)
    insp = sa.inspect(conn)
    found = {c["name"]: c for c in insp.get_columns(table.name, schema=table.schema)}
    exact = reflected_vector_family(conn, table.name, table.schema)  # vector(384): dims compared too
    problems = []
    for name, family in expected_layout(table, conn.dialect).items():
        got = exact.get(name) or (_family(found[name]["type"]) if name in found else None)
        if got is None:
            problems.append(f"column {name!r} ({family}) is missing")
        elif got != family:
            problems.append(f"column {name!r} is {got}, expected {family}")
    for name, col in found.items():
        if name not in table.columns and not col.get("nullable", True) and col.get("default") is None:
            problems.append(f"extra column {name!r} is NOT NULL without a default")
    pk = insp.get_pk_constraint(table.name, schema=table.schema).get("constrained_columns") or []
    if sorted(pk) != ["model_version", "source_key"]:
        problems.append(f"primary key is ({', '.join(pk)}), expected (source_key, model_version)")
    if problems:
        raise ConfigError(
            f"results table {shown_name!r} already exists with a different layout: {'; '.join(problems)}. "
            "It was made for another model or source; choose another --results-table "
            "(or drop or rename the existing table)"
        )
