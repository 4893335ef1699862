"""How values are stored: float32 vectors, UTC timestamps, JSON, and keys as text.

PostgreSQL stores a vector as ``real[]``; SQLite as a BLOB of little-endian
float32 bytes. Both round-trip a float32 vector bit for bit. SQLite has no
timestamp type, so timestamps are ISO-8601 text with an explicit UTC offset.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from numbers import Integral
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from shardwise.errors import ConfigError
from shardwise.sources.base import KeyType

__all__ = [
    "Float32Vector",
    "UtcTimestamp",
    "as_vector",
    "check_key",
    "decode_json",
    "decode_row",
    "decode_timestamp",
    "encode_json",
    "key_text",
    "pg_binary_float4_array",
    "timestamp_param",
    "utc_now",
]

_LE_F32 = np.dtype("<f4")
_PG_FLOAT4_OID = 700
# PostgreSQL's binary array element: a big-endian int32 length (always 4), then the big-endian float4.
_PG_ELEMENT = np.dtype([("length", ">i4"), ("value", ">f4")])


def as_vector(value: Any, column: str, dim: int | None) -> np.ndarray:
    """``value`` as a 1-d float32 array of length ``dim``; other floats are cast, not rejected."""
    arr = np.asarray(value, dtype=np.float32)
    if arr.ndim != 1 or (dim is not None and arr.shape[0] != dim):
        raise ConfigError(
            f"vector column {column!r} holds 1-d vectors of {dim} floats; got shape {arr.shape}. "
            "The model's outputs do not match its OutputColumn declaration"
        )
    return arr


def pg_binary_float4_array(arr: np.ndarray) -> bytes:
    """A 1-d float32 array in PostgreSQL's binary ``real[]`` format, built by numpy, not per element.

    Layout: ndim, has-nulls flag, element oid, then (length, lower bound) per
    dimension, then each element as length + value.
    """
    if arr.size == 0:
        return struct.pack(">iiI", 0, 0, _PG_FLOAT4_OID)
    body = np.empty(arr.shape[0], dtype=_PG_ELEMENT)
    body["length"] = 4
    body["value"] = arr
    return struct.pack(">iiIii", 1, 0, _PG_FLOAT4_OID, arr.shape[0], 1) + body.tobytes()


class Float32Vector(sa.types.TypeDecorator[np.ndarray]):
    """A float32 vector column: ``real[]`` on PostgreSQL, little-endian float32 bytes on SQLite."""

    impl = sa.LargeBinary
    cache_ok = True

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.ARRAY(sa.REAL()))
        return dialect.type_descriptor(sa.LargeBinary())

    def process_bind_param(self, value: Any, dialect: sa.Dialect) -> Any:
        if value is None:
            return None
        arr = np.asarray(value, dtype=np.float32)
        if dialect.name == "postgresql":
            return arr.tolist()
        return arr.astype(_LE_F32, copy=False).tobytes()

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> np.ndarray | None:
        if value is None:
            return None
        if isinstance(value, (bytes, bytearray, memoryview)):
            return np.frombuffer(bytes(value), dtype=_LE_F32).astype(np.float32)
        return np.asarray(value, dtype=np.float32)


class UtcTimestamp(sa.types.TypeDecorator[datetime]):
    """An aware UTC timestamp: ``timestamptz`` on PostgreSQL, ISO-8601 text on SQLite."""

    impl = sa.DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(sa.DateTime(timezone=True))
        return dialect.type_descriptor(sa.Text())

    def process_bind_param(self, value: Any, dialect: sa.Dialect) -> Any:
        return None if value is None else timestamp_param(dialect.name, value)

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> datetime | None:
        return decode_timestamp(value)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def timestamp_param(dialect: str, value: datetime) -> datetime | str:
    """A timestamp ready to bind: aware datetime on PostgreSQL, ISO text on SQLite; naive means UTC."""
    aware = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
    aware = aware.astimezone(timezone.utc)
    return aware if dialect == "postgresql" else aware.isoformat()


def bind_timestamp(conn: sa.Connection, value: datetime) -> datetime | str:
    """:func:`timestamp_param` for ``conn``'s dialect."""
    return timestamp_param(conn.dialect.name, value)


def decode_timestamp(value: Any) -> datetime | None:
    """A stored timestamp as an aware datetime in UTC, whichever the session's time zone."""
    if value is None:
        return None
    parsed = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc)


def encode_json(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), sort_keys=True, default=str)


def decode_json(value: Any) -> Any:
    """psycopg returns ``jsonb`` already decoded; SQLite returns the text."""
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def decode_row(
    row: Mapping[Any, Any], *, timestamps: Iterable[str] = (), json_columns: Iterable[str] = ()
) -> dict[str, Any]:
    """A stored row as a dict, with its ``timestamps`` decoded (:func:`decode_timestamp`) and its
    ``json_columns`` decoded (:func:`decode_json`; NULL becomes ``{}``), whichever the dialect returned."""
    fields = dict(row)
    for name in timestamps:
        fields[name] = decode_timestamp(fields[name])
    for name in json_columns:
        fields[name] = {} if fields[name] is None else decode_json(fields[name])
    return fields


def check_key(key: Any, key_type: KeyType, table: str) -> int | str:
    """The key as the results table stores it, or a ConfigError naming the mismatch."""
    if key_type == "int" and isinstance(key, Integral) and not isinstance(key, bool):
        return int(key)
    if key_type == "text" and isinstance(key, str):
        return key
    raise ConfigError(
        f"results table {table!r} has {key_type} keys; got key {key!r} of type {type(key).__name__}. "
        "Use a results table whose key type matches the source's key column"
    )


def key_text(key: int | str | None) -> str | None:
    """Keys are stored as text in ``shardwise_errors``, so int and text sources share it."""
    return None if key is None else str(key)
