"""Read Parquet footers, and nothing else, to plan: row counts, key null counts, and the schema.

pyarrow reads a footer with one ranged read of the file's tail (64 KiB, and a
second read only when the metadata is larger), so planning a dataset costs a
request or two per object, however large the objects are.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from shardwise.errors import SourceError
from shardwise.sources.base import KeyType
from shardwise.sources.files.objects import ObjectInfo, ObjectStore, relative_key
from shardwise.sources.files.spans import RowGroup

__all__ = ["Footer", "key_nulls", "read_footers"]

_FOOTER_THREADS = 8  # footers are small and latency-bound on S3: a few in flight hide the round trips


@dataclass(frozen=True, slots=True)
class Footer:
    """What planning needs from one object's footer."""

    obj: ObjectInfo
    row_groups: tuple[RowGroup, ...]
    key_type: KeyType | None = None
    """How results store the key: set when the columns were checked."""
    key_present: bool = True
    """Whether the object has a key column of a key type (only objects planning reads must have one)."""
    metadata: Any = field(default=None, repr=False, compare=False)
    """pyarrow's ``FileMetaData``: the check that keys are unique reads row groups with it, not the
    footer again."""

    @property
    def rows(self) -> int:
        return sum(g.rows for g in self.row_groups)


def read_footers(
    store: ObjectStore,
    objects: Sequence[ObjectInfo],
    key: str,
    inputs: Sequence[str],
    check: Sequence[bool],
    image: bool = False,
) -> list[Footer]:
    """The footers of ``objects``, in order; those with ``check`` set must have the key and ``inputs``.

    ``image``: the first input is an image column, and a message missing it says so.
    """
    if not objects:
        return []
    jobs = list(zip(objects, check, strict=True))
    with ThreadPoolExecutor(max_workers=min(_FOOTER_THREADS, len(jobs))) as pool:
        return list(pool.map(lambda job: _read_footer(store, job[0], key, inputs, job[1], image), jobs))


def _read_footer(
    store: ObjectStore, obj: ObjectInfo, key: str, inputs: Sequence[str], check: bool, image: bool
) -> Footer:
    with store.open(obj) as handle:
        try:
            metadata = pq.ParquetFile(handle).metadata
        except pa.ArrowException as exc:
            raise SourceError(
                f"Parquet object {relative_key(store.identity, obj.key)!r} is not a readable Parquet file "
                f"({exc}); remove it from the location or point the location at the Parquet files only"
            ) from exc
    key_type: KeyType | None = None
    schema = metadata.schema.to_arrow_schema()
    if check:
        _check_columns(obj, schema, key, inputs, image)
        key_type = "int" if pa.types.is_integer(schema.field(key).type) else "text"
    column = _leaf_index(metadata, key)
    groups = tuple(
        RowGroup(obj, i, rg.num_rows, _null_count(rg, column), _key_range(rg, column))
        for i, rg in ((i, metadata.row_group(i)) for i in range(metadata.num_row_groups))
    )
    usable = schema.get_field_index(key) >= 0 and _is_key_type(schema.field(key).type)
    return Footer(obj, groups, key_type, key_present=usable, metadata=metadata)


def _check_columns(obj: ObjectInfo, schema: pa.Schema, key: str, inputs: Sequence[str], image: bool) -> None:
    roles = (
        ("key", "key"),
        ("image", "image_column") if image else ("text", "text_column"),
        *(("input", "prompt or text_pair_column") for _ in inputs[1:]),
    )
    for (role, argument), name in zip(roles, (key, *inputs), strict=True):
        if schema.get_field_index(name) < 0:
            raise SourceError(
                f"{role} column {name!r} not in Parquet object {obj.key!r}; columns are: "
                f"{', '.join(schema.names)}; pass the right name as {argument}="
            )
    key_type = schema.field(key).type
    if not _is_key_type(key_type):
        raise SourceError(
            f"key column {key!r} of {obj.key!r} has type {key_type}; a key must be an integer or "
            "string column, so that results can be joined back: choose another key column"
        )


def _is_key_type(data_type: pa.DataType) -> bool:
    if pa.types.is_dictionary(data_type):
        data_type = data_type.value_type
    textual = pa.types.is_string(data_type) or pa.types.is_large_string(data_type)
    return pa.types.is_integer(data_type) or textual or str(data_type) == "string_view"


def _leaf_index(metadata: Any, name: str) -> int | None:
    """The Parquet column index of top-level column ``name``, where its statistics live."""
    schema = metadata.schema
    return next((i for i in range(len(schema)) if schema.column(i).path == name), None)


def _null_count(row_group: Any, column: int | None) -> int | None:
    if column is None:
        return None
    stats = row_group.column(column).statistics
    return stats.null_count if stats is not None and stats.has_null_count else None


def _key_range(row_group: Any, column: int | None) -> tuple[Any, Any] | None:
    """(min, max) of the key from the statistics, when both are there and both ints or both texts."""
    if column is None:
        return None
    stats = row_group.column(column).statistics
    if stats is None or not stats.has_min_max:
        return None
    low, high = stats.min, stats.max
    for kind in (int, str):
        if isinstance(low, kind) and isinstance(high, kind) and not isinstance(low, bool):
            return low, high
    return None  # bytes (a text key's statistics that are not UTF-8), floats: read the keys instead


def key_nulls(metadata: Any, index: int, key: str) -> int | None:
    """Null keys in row group ``index`` as its footer counts them; None when the footer does not say."""
    return _null_count(metadata.row_group(index), _leaf_index(metadata, key))
