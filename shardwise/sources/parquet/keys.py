"""Read chosen rows of a Parquet dataset by key: a full scan of the key column, one row group at a time.

Parquet has no index, so finding a few keys means reading the key column of
every row group of every object. That is fine for a redrive, which reads the
dead letters of one run, and it stays cheap in two ways: a row group's key
column is read first, and its text column is read only when some key matched
(pyarrow's ``is_in``); and memory stays flat, at most one row group's keys and
one batch of key and text columns. Rows come in storage order (object key,
row group, row). The keyed read lists the dataset as it is now: it reads
current data, not a planned listing.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardwise.errors import SourceError
from shardwise.sources.base import Key, SourceRow
from shardwise.sources.files.objects import ObjectInfo, ObjectStore
from shardwise.sources.keys import parse_keys
from shardwise.sources.parquet.text import input_values

__all__ = ["keyed_rows"]


def keyed_rows(
    store: ObjectStore,
    objects: Sequence[ObjectInfo],
    columns: Sequence[str],
    keys: Sequence[Key],
    batch_rows: int,
) -> Generator[SourceRow, None, None]:
    """Stream the rows of ``objects`` whose key (``columns[0]``) is in ``keys``, values from the rest."""
    for obj in objects:
        with store.open(obj) as handle:
            parquet = _open(handle, obj)
            wanted = _value_set(parquet, obj, columns, keys, store.identity)
            for index in range(parquet.num_row_groups):
                yield from _row_group(parquet, obj, index, columns, wanted, batch_rows)


def _open(handle: IO[bytes], obj: ObjectInfo) -> Any:
    try:
        return pq.ParquetFile(handle, pre_buffer=False)
    except pa.ArrowException as exc:
        raise SourceError(
            f"{obj.key!r} is not a readable Parquet file ({exc}); remove it from the location "
            "or rewrite it, then redrive again"
        ) from exc


def _value_set(
    parquet: Any, obj: ObjectInfo, columns: Sequence[str], keys: Sequence[Key], where: str
) -> pa.Array:
    """The keys as an Arrow array of the object's key type (text keys become ints for an integer key)."""
    schema: pa.Schema = parquet.schema_arrow
    for role, name in zip(("key", "text", *("input" for _ in columns[2:])), columns, strict=True):
        if schema.get_field_index(name) < 0:
            raise SourceError(
                f"{role} column {name!r} not in Parquet object {obj.key!r}; columns are: "
                f"{', '.join(schema.names)}; every object must hold the key and input columns"
            )
    key_type = schema.field(columns[0]).type
    if pa.types.is_dictionary(key_type):
        key_type = key_type.value_type
    if pa.types.is_integer(key_type):
        return pa.array(parse_keys(keys, "int", where), pa.int64())
    return pa.array(parse_keys(keys, "text", where), pa.string())


def _row_group(
    parquet: Any, obj: ObjectInfo, index: int, columns: Sequence[str], wanted: pa.Array, batch_rows: int
) -> Iterator[SourceRow]:
    key, *inputs = columns
    where = f"row group {index} of Parquet object {obj.key!r}"
    try:
        found = pc.is_in(parquet.read_row_group(index, columns=[key], use_threads=False).column(0), wanted)
        if not pc.any(found).as_py():
            return  # no wanted key here: the text column is never read
        batches = parquet.iter_batches(
            batch_size=batch_rows, row_groups=[index], columns=list(dict.fromkeys(columns)), use_threads=False
        )
        for batch in batches:
            picked = batch.filter(pc.is_in(batch.column(key), wanted))
            keys = picked.column(key).to_pylist()
            values = input_values(picked, inputs, keys, where)
            yield from (SourceRow(k, v) for k, v in zip(keys, values, strict=True))
    except (pa.ArrowException, OSError) as exc:  # pyarrow raises a damaged page as OSError
        raise SourceError(
            f"cannot read row group {index} of Parquet object {obj.key!r}: {exc}; "
            "the file is damaged: rewrite it, then redrive again"
        ) from exc
