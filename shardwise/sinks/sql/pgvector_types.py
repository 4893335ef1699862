"""pgvector's column types in SQLAlchemy, their limits, and how an existing column is recognised.

``vector(n)`` stores n float32 values (4 bytes each), ``halfvec(n)`` n float16
values (2 bytes each: half the storage, about three significant digits).
Both hold up to 16000 dimensions; an HNSW index covers a ``vector`` of up to
2000 and a ``halfvec`` of up to 4000 (pgvector 0.7+). Values travel as
pgvector's text form ``[1,2.5,-3]`` on this path; bulk loads use binary COPY
(:mod:`shardwise.sinks.sql.pgvector_copy`).

SQLAlchemy reflects a type it does not know as ``NullType`` with a warning, so
:func:`recognise_vector_types` teaches one dialect the two names, and
:func:`reflected_vector_family` reads the exact ``vector(384)`` spelling from
the catalogue, so a layout check can compare dimensions too.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, cast

import numpy as np
import sqlalchemy as sa

from shardwise.errors import ConfigError

__all__ = [
    "HNSW_MAX_DIMS",
    "MAX_DIMS",
    "HalfVec",
    "Vector",
    "VectorKind",
    "recognise_vector_types",
    "reflected_vector_family",
    "vector_text",
]

VectorKind = Literal["vector", "halfvec"]
MAX_DIMS = 16000
"""The most dimensions a ``vector`` or ``halfvec`` column holds."""
HNSW_MAX_DIMS: dict[VectorKind, int] = {"vector": 2000, "halfvec": 4000}
"""The most dimensions an HNSW index covers, by column kind."""

_FAMILY_SQL = sa.text(
    "SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS family"
    " FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid"
    " WHERE a.attrelid = to_regclass(:relation) AND a.attnum > 0 AND NOT a.attisdropped"
    " AND t.typname IN ('vector', 'halfvec')"
)


def vector_text(value: Any, column: str, dim: int | None) -> str:
    """A 1-d float vector in pgvector's text form ``[1,2.5,-3]``; ConfigError if its length is not ``dim``."""
    arr = np.asarray(value, dtype=np.float32)
    if arr.ndim != 1 or (dim is not None and arr.shape[0] != dim):
        raise ConfigError(
            f"vector column {column!r} holds 1-d vectors of {dim} floats; got shape {arr.shape}. "
            "The model's outputs do not match the column's declaration"
        )
    # repr of the float64 a float32 widens to parses back to the same float32.
    return "[" + ",".join(map(repr, arr.tolist())) + "]"


def _parse_vector_text(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value.astype(np.float32, copy=False)
    body = str(value).strip()[1:-1]
    if not body:
        return np.zeros(0, dtype=np.float32)
    return np.array(body.split(","), dtype=np.float32)


class _PgVectorType(sa.types.UserDefinedType[np.ndarray]):
    """A pgvector column of ``dim`` dimensions (None: any), bound from and read as float32 numpy arrays."""

    cache_ok = True
    type_name: ClassVar[str]

    def __init__(self, dim: int | None = None) -> None:
        if dim is not None and not 1 <= dim <= MAX_DIMS:
            raise ConfigError(
                f"a {self.type_name} column holds 1 to {MAX_DIMS} dimensions; got {dim}. "
                "Use a model with fewer dimensions, or --embedding-type array (real[] has no limit)"
            )
        self.dim = dim

    def get_col_spec(self, **kw: Any) -> str:
        return self.type_name if self.dim is None else f"{self.type_name}({self.dim})"

    def bind_processor(self, dialect: sa.Dialect) -> Any:
        name, dim = self.type_name, self.dim

        def process(value: Any) -> str | None:
            return None if value is None else vector_text(value, name, dim)

        return process

    def result_processor(self, dialect: sa.Dialect, coltype: object) -> Any:
        def process(value: Any) -> np.ndarray | None:
            return None if value is None else _parse_vector_text(value)

        return process

    class comparator_factory(sa.types.UserDefinedType.Comparator[np.ndarray]):
        """pgvector's distance operators, so a query reads ``col.cosine_distance(q)``, not a raw op."""

        def cosine_distance(self, other: Any) -> sa.ColumnElement[float]:
            return cast("sa.ColumnElement[float]", self.op("<=>", return_type=sa.Float)(other))

        def l2_distance(self, other: Any) -> sa.ColumnElement[float]:
            return cast("sa.ColumnElement[float]", self.op("<->", return_type=sa.Float)(other))

        def max_inner_product(self, other: Any) -> sa.ColumnElement[float]:
            """The negated inner product (smaller is nearer), as pgvector's ``<#>`` returns it."""
            return cast("sa.ColumnElement[float]", self.op("<#>", return_type=sa.Float)(other))


class Vector(_PgVectorType):
    """pgvector's ``vector(dim)``: float32 values, 4 bytes a dimension."""

    type_name = "vector"
    cache_ok = True  # SQLAlchemy reads it from each class's own namespace, not a base's


class HalfVec(_PgVectorType):
    """pgvector's ``halfvec(dim)``: float16 values, 2 bytes a dimension; reads back as float32."""

    type_name = "halfvec"
    cache_ok = True


def recognise_vector_types(dialect: sa.Dialect) -> None:
    """Let this dialect reflect ``vector(n)``/``halfvec(n)`` columns as :class:`Vector`/:class:`HalfVec`.

    Without it SQLAlchemy reflects them as ``NullType`` and warns. The names go
    into this dialect object's own table (the engine's), not SQLAlchemy's
    global one, so other engines are untouched. Idempotent; a no-op off PostgreSQL.
    """
    if dialect.name != "postgresql":
        return
    names = dict(getattr(dialect, "ischema_names", {}))
    names.update({"vector": Vector, "halfvec": HalfVec})
    dialect.ischema_names = names  # type: ignore[attr-defined]


def reflected_vector_family(conn: sa.Connection, table: str, schema: str | None) -> dict[str, str]:
    """Column name → ``vector(384)`` or ``halfvec(384)`` for each pgvector column of an existing table.

    Read from ``pg_attribute`` by ``format_type``, the spelling PostgreSQL
    itself prints, so dimensions compare exactly. Other columns are left out;
    an empty dict on another database, for a missing table, or one with none.
    """
    if conn.dialect.name != "postgresql":
        return {}
    preparer = conn.dialect.identifier_preparer
    relation = (
        preparer.quote(table)
        if schema is None
        else f"{preparer.quote_schema(schema)}.{preparer.quote(table)}"
    )
    rows = conn.execute(_FAMILY_SQL, {"relation": relation}).all()
    return {str(row.name): str(row.family) for row in rows}
