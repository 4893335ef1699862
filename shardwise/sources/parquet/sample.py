"""What a Parquet text column holds, read from the first object before planning: its type, and for a
binary column the first bytes of a few of its values (see :mod:`shardwise.sources.binary`)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from shardwise.errors import SourceError
from shardwise.sources.base import SourceValues
from shardwise.sources.binary import PREFIX_BYTES, SAMPLE_ROWS, binary_values
from shardwise.sources.files.objects import ObjectInfo, ObjectStore, relative_key

__all__ = ["text_column_values"]

_READ_BYTES = 1 << 16
"""Read in pieces this large, so a sample of a column of pictures costs a page or two, not its chunk."""


def text_column_values(store: ObjectStore, obj: ObjectInfo, column: str, what: str) -> SourceValues:
    """``text`` unless ``column`` is binary in ``obj`` and a sample of its values holds no text.

    An object without the column is left to planning, whose check names the columns there are.
    """
    try:
        with store.open(obj) as handle:
            parquet = pq.ParquetFile(handle, pre_buffer=False, buffer_size=_READ_BYTES)
            schema = parquet.schema_arrow
            if schema.get_field_index(column) < 0 or not _is_binary(schema.field(column).type):
                return SourceValues("text", what, column)
            type_name = str(schema.field(column).type)
            batches = parquet.iter_batches(batch_size=SAMPLE_ROWS, columns=[column], use_threads=False)
            batch = next(batches, None)
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(
            f"cannot read column {column!r} of Parquet object {relative_key(store.identity, obj.key)!r} "
            f"({exc}); the file is damaged: rewrite it"
        ) from exc
    values = [] if batch is None else batch.column(0).to_pylist()
    sample = [bytes(value[:PREFIX_BYTES]) for value in values if value is not None]
    return binary_values(what, column, f"Parquet {type_name} column", sample)


def _is_binary(data_type: pa.DataType) -> bool:
    if pa.types.is_dictionary(data_type):
        data_type = data_type.value_type
    binary = pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type)
    return binary or pa.types.is_fixed_size_binary(data_type) or str(data_type) == "binary_view"
