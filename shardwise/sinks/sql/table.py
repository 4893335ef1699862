"""The SQL sink's results table: its layout, built in code, and the check that an existing table matches.

The results table is named by the user and its columns follow the model's
outputs, so it is a ``sa.Table`` (SQLAlchemy quotes every identifier).
"""

from __future__ import annotations

from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from shardwise.db.codec import Float32Vector, UtcTimestamp
from shardwise.errors import ConfigError
from shardwise.model import OutputColumn
from shardwise.sinks.naming import LINEAGE_COLUMNS, STAGE_TABLE, check_outputs, parse_table_name
from shardwise.sources.base import KeyType

__all__ = ["VectorStorage", "add_columns", "check_layout", "expected_layout", "results_table", "stage_table"]

VectorStorage = Literal["array", "vector", "halfvec"]


def _output_type(out: OutputColumn, vectors: VectorStorage) -> sa.types.TypeEngine[Any]:
    if out.kind == "vector" and vectors != "array":
        from shardwise.sinks.sql.pgvector import HalfVec, Vector

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
    pgvector's ``vector(dim)``/``halfvec(dim)`` (see :mod:`shardwise.sinks.sql.pgvector`).
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


def check_layout(
    conn: sa.Connection, table: sa.Table, shown_name: str, *, ours: bool
) -> list[sa.Column[Any]]:
    """The nullable columns of ``table`` the existing table lacks, to add, when Shardwise made it
    (``ours``); a ConfigError listing every other difference, and for a table the user made, those
    columns too (it is never altered)."""
    from shardwise.sinks.sql.pgvector import recognise_vector_types, reflected_vector_family

    recognise_vector_types(conn.dialect)
    insp = sa.inspect(conn)
    found = {c["name"]: c for c in insp.get_columns(table.name, schema=table.schema)}
    exact = reflected_vector_family(conn, table.name, table.schema)  # vector(384): dims compared too
    problems, missing = [], []
    for name, family in expected_layout(table, conn.dialect).items():
        got = exact.get(name) or (_family(found[name]["type"]) if name in found else None)
        if got is None and ours and table.columns[name].nullable:
            missing.append(table.columns[name])
        elif got is None:
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
        made = "" if ours else " Shardwise has no record of making it (shardwise_tables), so never alters it;"
        raise ConfigError(
            f"results table {shown_name!r} already exists with a different layout: {'; '.join(problems)}."
            f"{made} choose another --results-table (or drop or rename the existing table, or give it "
            "those columns yourself)"
        )
    return missing


def add_columns(conn: sa.Connection, table: sa.Table, columns: list[sa.Column[Any]]) -> None:
    """``ALTER TABLE ... ADD COLUMN`` each of ``columns`` (nullable), every identifier quoted by the
    dialect: a table Shardwise made gains the outputs a later run stores."""
    name = conn.dialect.identifier_preparer.format_table(table)
    for column in columns:
        spec = sa.schema.CreateColumn(column).compile(dialect=conn.dialect)
        conn.exec_driver_sql(f"ALTER TABLE {name} ADD COLUMN {spec}")
