"""A Parquet dataset as a source: a local folder, glob or file, or an S3 prefix or object.

Planning lists the objects and reads their footers: shards are contiguous
row-group spans balanced by the footers' row counts. It also reads the key
column of every object (never the text), because Parquet cannot declare a
key unique: a key on two rows, in one file or two, is refused, naming the
key and its files, since one row's result would silently replace the
other's (see :mod:`shardwise.sources.parquet.unique`); that read counts the
NULL keys exactly, too. Rows with a NULL key cannot be addressed: they are
not read, and the plan counts them in ``params["null_keys"]``. Reading
streams a shard's spans, key and text columns only, checking that every
object is still the one that was planned (its ETag, or a local file's size
and mtime).

A keyed read (:meth:`ParquetSource.read_keys`, for a redrive of dead
letters) scans the key column of the current listing: see
:mod:`shardwise.sources.parquet.keys`.

An image column (``image_column``) gives each row an
:class:`~shardwise.model.binary_value.BinaryValue`: a binary column's bytes, or the
file or S3 object a string column's reference names, fetched as the shard is
read (see :mod:`shardwise.sources.images`).

Only-new runs skip objects whose (object key, ETag) the ledger has already
seen (an image behind a reference is not looked at: an unchanged Parquet
object whose referenced image changed is still skipped); listing, ETags and
the checks of a plan are every file kind's (:mod:`shardwise.sources.files`).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from shardwise.retry_policy import RetryPolicy
from shardwise.sources.base import Key, NewOnly, Shard, SourcePlan, SourceRow, SourceValues
from shardwise.sources.files.objects import Listing, ObjectInfo, relative_key
from shardwise.sources.files.source import FileSource, is_new, new_only_params, one_key_type
from shardwise.sources.files.spans import RowGroup, cut, to_shard
from shardwise.sources.images import ImageAccess, image_column_of
from shardwise.sources.parquet.footers import Footer, read_footers
from shardwise.sources.parquet.keys import keyed_rows
from shardwise.sources.parquet.rows import ShardRows
from shardwise.sources.parquet.sample import text_column_values
from shardwise.sources.parquet.unique import check_unique_keys
from shardwise.sources.sizing import Sizing

__all__ = ["ParquetSource"]

_BATCH_ROWS = 1024


class ParquetSource(FileSource):
    """Plans and reads a Parquet dataset; safe to share between threads.

    ``location`` is a local folder (read recursively), a local glob
    (``/data/*.parquet``, ``**`` allowed), a single file, or
    ``s3://bucket/prefix/`` (a prefix, or one object). Listings read only names
    ending in ``.parquet``; the others are ignored and counted in the plan's
    ``ignored_objects``. S3 uses ``s3_client`` if given, otherwise one boto3
    client made on first use from the standard AWS settings (environment,
    profile, ``AWS_ENDPOINT_URL``).

    A location without any Parquet object is a :class:`SourceError` (most
    likely a wrong path or prefix). An only-new plan in which every object was
    seen already is an empty plan, not an error: an event-triggered run with
    nothing new has nothing to do.
    """

    kind = "parquet"
    suffixes: ClassVar[tuple[str, ...]] = (".parquet",)
    files: ClassVar[str] = "Parquet objects"
    plan_fields: ClassVar[tuple[str, ...]] = ("key", "text_column", "image_column", "input_columns")

    def __init__(
        self,
        location: str,
        key: str = "id",
        text_column: str = "text",
        *,
        input_columns: Mapping[str, str] | None = None,
        image_column: str | None = None,
        image_access: ImageAccess | None = None,
        s3_client: Any | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._images = image_column_of(
            image_column, text_column, input_columns, s3_client, retry, image_access
        )
        text_column = text_column if image_column is None else image_column
        self._read_columns(key, text_column, input_columns)
        self.image_column = image_column
        super().__init__(location, s3_client, retry)
        if self._images is not None and self.identity.startswith("s3://"):
            self._images.share_store(self._store)  # one client for the dataset and the images it names

    def plan_sized(self, sizing: Sizing, new_only: NewOnly | None) -> SourcePlan:
        """Cut into ``shards`` shards (fewer if there are fewer row groups), or runs of ``rows_per_shard``.

        With neither, :class:`~shardwise.sources.sizing.Sizing` decides. A shard's
        ``expected_rows`` is the rows it will yield: its row groups' rows less
        their NULL keys (rows with a NULL key are skipped, and counted in
        ``null_keys``). With ``new_only``, objects whose (key, ETag) was seen
        are skipped, but their footers are still read, so that
        ``skipped_rows`` is exact (the CLI's dry run reports it); only planned
        objects must hold both columns.

        A key that appears on more than one row of the listed objects (seen
        ones too) is a :class:`ConfigError` naming it and its objects: the
        key column of every object is read to check, which also counts the
        NULL keys exactly (see :mod:`shardwise.sources.parquet.unique`).
        """
        listing = self._list()
        fresh = [is_new(o, new_only) for o in listing.objects]
        footers = read_footers(
            self._store, listing.objects, self.key, self.inputs, fresh, self._images is not None
        )
        planned = [f for f, new in zip(footers, fresh, strict=True) if new]
        skipped = [f for f, new in zip(footers, fresh, strict=True) if not new]
        one_key_type(f.key_type for f in planned)  # one key type, before the keys are compared
        scan = check_unique_keys(self._store, footers, self.key)
        groups = [scan.exact(g) for f in planned for g in f.row_groups]
        shards = [to_shard(i, run) for i, run in enumerate(cut(groups, sizing))]
        return self._plan(listing, shards, self._params(listing, planned, skipped, groups, sizing, new_only))

    def _shard_rows(self, plan: SourcePlan, shard: Shard, skip: int) -> Generator[SourceRow, None, None]:
        """In storage order; an image column's references are fetched as the rows are read (see
        :mod:`shardwise.sources.images`)."""
        rows = self.read(plan, shard, skip=skip)
        try:
            yield from self._values(rows)
        finally:
            rows.close()

    def read(self, plan: SourcePlan, shard: Shard, *, skip: int = 0) -> ShardRows:
        """Stream ``shard``'s rows in storage order (object, row group, row), not sorted by key.

        The returned iterator counts the rows it skipped for a null key in
        ``null_keys``. ``skip`` starts that many rows into the shard (a shard
        resumed after its committed chunks).
        """
        self._check_plan(plan)
        return ShardRows(self._store, shard, self.key, self.inputs, _BATCH_ROWS, skip)

    def read_keys(self, keys: Sequence[Key]) -> Generator[SourceRow, None, None]:
        """Stream the current rows whose key is in ``keys``, in storage order; absent keys are not yielded.

        A full scan of the key column of the dataset as listed now (fine for
        dead letters, not for bulk lookups). Text keys are converted to an
        integer key column's type; one that cannot be is a :class:`ConfigError`.
        """
        if keys:
            columns = (self.key, *self.inputs)
            yield from self._values(keyed_rows(self._store, self._list().objects, columns, keys, _BATCH_ROWS))

    def _check_objects(self, objects: Sequence[ObjectInfo]) -> None:
        """Fail now if an object is not readable Parquet (random bytes, a truncated file), or if a key
        repeats.

        Every footer is read, as planning reads them all (a request or two per
        object, eight at a time): a broken file is one line before a run starts,
        instead of a run that fails while planning. The key column of every
        object is read, as planning reads it, so that a repeated key is one
        line naming it and its files (:mod:`shardwise.sources.parquet.unique`).
        The other columns are left to planning, which knows which objects an
        only-new run reads.
        """
        footers = read_footers(self._store, objects, self.key, self.inputs, check=[False] * len(objects))
        check_unique_keys(self._store, footers, self.key)

    def value_kind(self) -> SourceValues:
        """Pictures for an image column; text for a text column, unless it is ``binary`` in the first
        object and a sample of its values there holds no text (see :mod:`shardwise.sources.binary`)."""
        role = "text" if self._images is None else "image"
        what = f"{role} column {self.text_column!r} of {self.identity}"
        if self._images is not None:
            return SourceValues("image", what, self.text_column)
        return text_column_values(self._store, self._list().objects[0], self.text_column, what)

    def close(self) -> None:
        """Close the S3 clients this source created. Nothing else is held between calls."""
        super().close()
        if self._images is not None:
            self._images.close()

    def _values(self, rows: Iterator[SourceRow]) -> Generator[SourceRow, None, None]:
        """``rows`` as they are, or with ``BinaryValue`` values when this source reads an image column."""
        if self._images is None:
            yield from rows
        else:
            yield from self._images.rows(rows)

    def _params(
        self,
        listing: Listing,
        planned: Sequence[Footer],
        skipped: Sequence[Footer],
        groups: Sequence[RowGroup],
        sizing: Sizing,
        new_only: NewOnly | None,
    ) -> dict[str, Any]:
        return {
            **self.params,
            "key_type": one_key_type(f.key_type for f in planned),
            **sizing.params(sum(g.readable_rows for g in groups)),
            "objects": len(planned),
            "ignored_objects": listing.ignored,
            "row_groups": len(groups),
            "rows": sum(g.rows for g in groups),
            "null_keys": sum(g.null_keys or 0 for g in groups),
            "null_keys_known": all(g.null_keys is not None for g in groups),
            "null_key_objects": sorted(
                {relative_key(self.identity, g.obj.key) for g in groups if g.null_keys}
            )[:5],
            "new_only": new_only_params(new_only),
            "skipped_objects": len(skipped),
            "skipped_rows": sum(f.rows for f in skipped),
        }
