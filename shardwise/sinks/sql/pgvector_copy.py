"""Binary COPY of float32 numpy vectors into pgvector's ``vector`` and ``halfvec`` columns (psycopg 3).

pgvector's binary form is a big-endian int16 dimension count, an int16 that
must be 0, then each value as a big-endian float4 (``vector``) or float2
(``halfvec``). numpy writes the values in one pass per row, as
:func:`shardwise.db.codec.pg_binary_float4_array` does for ``real[]``:
no Python float per element. The types come from an extension, so their oids
differ between databases and are looked up on the connection.
"""

from __future__ import annotations

import functools
import struct
from typing import Any, Literal

import numpy as np
import psycopg
from psycopg import pq
from psycopg.adapt import AdaptersMap, Dumper
from psycopg.types import TypeInfo

from shardwise.errors import ConfigError
from shardwise.sinks.sql.pgvector_types import VectorKind

__all__ = ["copy_type_name", "pg_binary_halfvec", "pg_binary_vector", "register_vector_dumpers"]

_HEADER = struct.Struct(">HH")
_ELEMENT: dict[VectorKind, np.dtype[Any]] = {"vector": np.dtype(">f4"), "halfvec": np.dtype(">f2")}


def _pg_binary(arr: Any, kind: VectorKind) -> bytes:
    values = np.asarray(arr, dtype=_ELEMENT[kind])
    if values.ndim != 1:
        raise ConfigError(f"a {kind} value is a 1-d vector; got shape {values.shape}")
    return _HEADER.pack(values.shape[0], 0) + values.tobytes()


def pg_binary_vector(arr: Any) -> bytes:
    """A 1-d float vector in pgvector's binary ``vector`` form."""
    return _pg_binary(arr, "vector")


def pg_binary_halfvec(arr: Any) -> bytes:
    """A 1-d float vector in pgvector's binary ``halfvec`` form (values rounded to float16)."""
    return _pg_binary(arr, "halfvec")


class _VectorDumper(Dumper):
    format = pq.Format.BINARY
    kind: VectorKind = "vector"

    def dump(self, obj: Any) -> bytes:
        return _pg_binary(obj, self.kind)


@functools.cache
def _dumper_class(kind: VectorKind, oid: int) -> type[Dumper]:
    """One dumper class per (kind, oid): psycopg finds a dumper for COPY's ``set_types`` by its ``oid``."""
    return type(f"_{kind.capitalize()}Dumper{oid}", (_VectorDumper,), {"kind": kind, "oid": oid})


def register_vector_dumpers(adapters: AdaptersMap, raw_conn: psycopg.Connection[Any]) -> None:
    """Register binary dumpers for ``vector`` and ``halfvec`` on ``adapters`` (a cursor's, usually).

    After this, ``copy.set_types([..., "vector", ...])`` on a cursor using
    these adapters writes float32 numpy arrays in one numpy pass. The oids
    are fetched from ``raw_conn``; ``halfvec`` is skipped where the installed
    pgvector predates it (0.7). Raises ConfigError when the ``vector``
    extension is not installed in this database.
    """
    found = False
    for kind in ("vector", "halfvec"):
        info = TypeInfo.fetch(raw_conn, kind)
        if info is None:
            continue
        found = True
        adapters.types.add(info)
        # Registered by oid only (no Python class): COPY's set_types picks it, plain queries do not.
        adapters.register_dumper(None, _dumper_class(kind, info.oid))
    if not found:
        raise ConfigError(
            "the database has no 'vector' type, so pgvector columns cannot be loaded; "
            "run CREATE EXTENSION vector as a privileged role, or use --embedding-type array"
        )


def copy_type_name(kind: Literal["array", "vector", "halfvec"]) -> str:
    """The type name COPY's ``set_types`` takes for an embedding column of this kind."""
    names = {"array": "float4[]", "vector": "vector", "halfvec": "halfvec"}
    try:
        return names[kind]
    except KeyError:
        raise ConfigError(f"embedding column kind {kind!r} is not one of: {', '.join(names)}") from None
