"""Stream one shard of a Parquet plan: its spans, one row group at a time, two columns only.

Memory stays flat: at most one batch of one row group of the key and text
columns is held, whatever the shard's size. A read may start ``skip`` rows
into the shard (a shard resumed after its committed chunks): row groups that
lie wholly before that point are passed over by their footers' counts, their
data unread. Rows come in storage order (object
key, row group, row), which is deterministic; Parquet has no index to sort by
key without holding the shard, so they are not sorted by key.

A text value that is not valid UTF-8 fails only its own row (see
:mod:`~shardwise.sources.parquet.text`); a damaged page fails the shard with a
:class:`SourceError` naming the object and row group. Page checksums are
verified where the writer stored them (pyarrow's ``write_page_checksum``,
parquet-java's ``parquet.page.write-checksum.enabled``), so a garbled page is
caught even when it would still decode.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from shardwise.errors import ConfigError, SourceError
from shardwise.sources.base import Shard, SourceRow
from shardwise.sources.files.objects import ObjectInfo, ObjectStore
from shardwise.sources.files.spans import Span, shard_spans
from shardwise.sources.parquet.footers import key_nulls
from shardwise.sources.parquet.text import input_values

__all__ = ["ShardRows"]


class ShardRows(Iterator[SourceRow]):
    """The rows of one shard, as an iterator that also counts what it skipped.

    A row whose key is null cannot be joined back to the source, so it is
    skipped; ``null_keys`` counts them and ``rows`` counts the rows yielded.
    The first ``skip`` rows that have a key are not yielded; ``skipped``
    counts them (row groups passed over whole count no null keys).
    ``inputs`` names the text column, then any other input columns (each
    row's value is then a :class:`~shardwise.model.text.Inputs`).
    Text values pass through untouched (``str``, ``bytes`` for a binary
    column, ``None``), except that one that is not UTF-8 in a text column
    comes as an :class:`~shardwise.model.text.UndecodableText`: the engine decides
    what is usable.
    """

    def __init__(
        self,
        store: ObjectStore,
        shard: Shard,
        key: str,
        inputs: Sequence[str],
        batch_rows: int,
        skip: int = 0,
    ) -> None:
        if not isinstance(skip, int) or skip < 0:
            raise ConfigError(f"skip must be a number of rows >= 0; got {skip!r}")
        self.rows = 0
        self.null_keys = 0
        self.skipped = 0
        self._skip = skip
        self._key, self._inputs = key, tuple(inputs)
        self._columns = list(dict.fromkeys([key, *inputs]))
        self._batch_rows = batch_rows
        self._iter = self._spans(store, shard_spans(shard))

    def __iter__(self) -> ShardRows:
        return self

    def __next__(self) -> SourceRow:
        return next(self._iter)

    def close(self) -> None:
        """Stop early and close the open object, if any."""
        self._iter.close()

    def _spans(self, store: ObjectStore, spans: list[Span]) -> Generator[SourceRow, None, None]:
        for obj, first, stop in spans:
            with store.open(obj) as handle:
                parquet = _open_parquet(handle, obj)
                for index in range(first, stop):
                    if self._skip and self._pass_over(parquet, index):
                        continue
                    yield from self._row_group(parquet, obj, index)

    def _pass_over(self, parquet: Any, index: int) -> bool:
        """Skip row group ``index`` unread when all its keyed rows are still to be skipped.

        A footer without a null count for the key cannot say how many rows
        have a key: that row group is read, and its rows skipped one by one.
        """
        nulls = key_nulls(parquet.metadata, index, self._key)
        if nulls is None:
            return False
        keyed = parquet.metadata.row_group(index).num_rows - nulls
        if keyed > self._skip:
            return False
        self._skip -= keyed
        self.skipped += keyed
        return True

    def _row_group(self, parquet: Any, obj: ObjectInfo, index: int) -> Iterator[SourceRow]:
        try:
            batches = parquet.iter_batches(
                batch_size=self._batch_rows, row_groups=[index], columns=self._columns, use_threads=False
            )
            where = f"row group {index} of Parquet object {obj.key!r}"
            for batch in batches:
                yield from self._rows_of(batch, where)
        except (pa.ArrowException, OSError) as exc:  # pyarrow raises a damaged page as OSError
            raise SourceError(
                f"cannot read row group {index} of Parquet object {obj.key!r}: {exc}; "
                "the file is damaged: rewrite it, then start a new run"
            ) from exc
        except UnicodeDecodeError as exc:  # text values never raise it (text_values): the key did
            raise SourceError(
                f"key column {self._key!r} in row group {index} of Parquet object {obj.key!r} holds a "
                f"value that is not valid UTF-8 ({exc.reason}), so results cannot be joined back to it; "
                "fix the program that wrote the file and rewrite it, then start a new run"
            ) from exc

    def _rows_of(self, batch: pa.RecordBatch, where: str) -> Iterator[SourceRow]:
        keys = batch.column(self._key).to_pylist()
        values = input_values(batch, self._inputs, keys, where)
        for key, value in zip(keys, values, strict=True):
            if key is None:
                self.null_keys += 1
                continue
            if self._skip:
                self._skip -= 1
                self.skipped += 1
                continue
            self.rows += 1
            yield SourceRow(key, value)


def _open_parquet(handle: IO[bytes], obj: ObjectInfo) -> Any:
    # pre_buffer=False: reads through a Python file object are serialised anyway,
    # so pre-buffering would only add a thread hop; each column chunk is one read.
    try:
        return pq.ParquetFile(handle, pre_buffer=False, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(
            f"{obj.key!r} is not a readable Parquet file ({exc}); it was readable when planned, "
            "so it was damaged since: rewrite it, then start a new run"
        ) from exc
