"""A Parquet text column as Python values, where one value that is not UTF-8 fails only its own row.

Parquet declares a column as text (``BYTE_ARRAY`` annotated ``STRING``) but
does not check the bytes, and neither do most writers nor pyarrow's reader:
an invalid value only fails when it becomes a Python ``str``, and then it
fails the whole batch with a bare ``UnicodeDecodeError``. So the batch is
converted as usual, and only when that fails is it read again as the bytes
it holds, value by value: each bad value becomes an
:class:`~shardwise.model.text.UndecodableText` naming its key and where it was
read, which the engine turns into a dead letter, and the other rows are
scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from shardwise.model.text import UndecodableText, row_value

__all__ = ["input_values", "text_values"]


def input_values(batch: pa.RecordBatch, columns: Sequence[str], keys: Sequence[Any], where: str) -> list[Any]:
    """Each row's value from its input ``columns``: the text, or :class:`~shardwise.model.text.Inputs`
    (see :func:`text_values`)."""
    per_column = [text_values(batch.column(name), keys, where) for name in columns]
    if len(per_column) == 1:
        return per_column[0]
    return [row_value(values, columns) for values in zip(*per_column, strict=True)]


def text_values(column: pa.Array | pa.ChunkedArray, keys: Sequence[Any], where: str) -> list[Any]:
    """``column`` as Python values, an undecodable text value as an ``UndecodableText``.

    ``keys`` are the rows' keys, in order; ``where`` names the row group and
    object for the message, e.g. ``row group 3 of Parquet object 's3://b/x.parquet'``.
    """
    try:
        values: list[Any] = column.to_pylist()  # the fast path: every value decodes
        return values
    except UnicodeDecodeError:
        pass
    raw = _as_binary(column).to_pylist()
    return [_decoded(value, key, where) for value, key in zip(raw, keys, strict=True)]


def _as_binary(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The same values as bytes: a cast between text and binary only relabels the buffers."""
    data_type = column.type
    if pa.types.is_dictionary(data_type):
        data_type = data_type.value_type
        column = column.cast(data_type)
    if pa.types.is_large_string(data_type):
        return column.cast(pa.large_binary())
    if pa.types.is_string_view(data_type):
        return column.cast(pa.binary_view())
    return column.cast(pa.binary())


def _decoded(value: bytes | None, key: Any, where: str) -> str | UndecodableText | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return UndecodableText(value, key, where)
