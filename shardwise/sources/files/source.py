"""What every file source kind shares: its location's store, its listing, its checks and its key type.

A file kind (Parquet, CSV and JSON Lines, an image folder) subclasses
:class:`FileSource` and implements the read of its files: planning
(``plan_sized``), reading a shard (``open_reader``), ``read_keys``,
``value_kind`` and ``params``. Listing a local folder, glob or file or an S3
prefix (with ETags), refusing a location without the kind's files, ``check``,
``close`` and refusing another source's plan come from here. Its plans read
objects (``SourcePlan.by_objects``): only-new skips the (object key, ETag)
pairs a completed run recorded (:func:`~shardwise.sources.files.spans.plan_objects`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

from shardwise.errors import ConfigError, SourceError
from shardwise.retry_policy import RetryPolicy
from shardwise.sources.base import NewOnly, ReadFrom, Shard, ShardReader, Source, SourcePlan, SourceRow
from shardwise.sources.files.objects import Listing, ObjectInfo, listing_digest
from shardwise.sources.files.stores import open_store

__all__ = ["FileSource", "is_new", "new_only_params", "one_key_type"]


class FileSource(Source):
    """A source of the files under one location whose names its kind reads; safe to share between threads."""

    plans_by_objects = True
    suffixes: ClassVar[tuple[str, ...]]
    """The names this kind reads (any case); the others are counted in a plan's ``ignored_objects``."""
    files: ClassVar[str]
    """What the kind's files are called in a message, as in ``no Parquet objects at ...``."""
    plan_fields: ClassVar[tuple[str, ...]] = ("key", "text_column", "input_columns")
    """The ``params`` a plan must share with this source to be read by it."""
    image_column: str | None = None
    """The column read as images instead of text (Parquet's ``--image-column``), if any."""

    def __init__(self, location: str, s3_client: Any | None = None, retry: RetryPolicy | None = None) -> None:
        """``s3_client`` is used as given, else one boto3 client is made on first use from the standard
        AWS settings; ``retry`` is the run's policy for S3 reads."""
        self._store = open_store(location, s3_client, suffixes=self.suffixes, retry=retry)
        self.identity = self._store.identity

    def _read_columns(self, key: str, text_column: str, input_columns: Mapping[str, str] | None) -> None:
        """Check and keep the columns a row is read from: its key, its text (or image), then the other
        inputs, which a kind whose files hold columns (not an image folder) reads."""
        named = (
            ("key", key),
            ("text_column", text_column),
            *(("input_columns", c) for c in input_columns or {}),
        )
        for name, value in named:
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{name} must name a column of the {self.files}, got {value!r}")
        self.key, self.text_column = key, text_column
        self.input_columns = list(input_columns or {})
        self.inputs = (text_column, *self.input_columns)
        """The columns a row's value is read from: the text (or the image column), then the others."""

    @property
    def params(self) -> dict[str, Any]:
        """What this source reads; the key's type is known once a plan has read the files."""
        return {
            "location": self.identity,
            "key": self.key,
            "key_type": None,
            "text_column": self.text_column,
            "image_column": self.image_column,
            "input_columns": self.input_columns,
        }

    @contextmanager
    def open_reader(
        self, plan: SourcePlan, shard: Shard, start: ReadFrom = ReadFrom()
    ) -> Iterator[ShardReader]:
        """Read ``shard`` from ``start.rows`` rows in, from the objects the plan listed (its snapshot).

        The order is fixed by the plan, so the same rows are skipped every time.
        """
        self._check_plan(plan)
        rows = self._shard_rows(plan, shard, start.rows)
        try:
            yield ShardReader(shard, plan.snapshot, False, rows)
        finally:
            rows.close()

    @abstractmethod
    def _shard_rows(self, plan: SourcePlan, shard: Shard, skip: int) -> Generator[SourceRow, None, None]:
        """The kind's read: ``shard``'s rows in the plan's order, less the first ``skip``."""

    def check(self) -> None:
        """Fail now if the location does not exist or cannot be listed (credentials, bucket, path), holds
        none of the kind's files, or (the kind's own check) one of them cannot be read."""
        self._store.probe()
        self._check_objects(self._list().objects)

    def close(self) -> None:
        """Close the S3 client this source created, if any. Nothing else is held between calls."""
        self._store.close()

    def _check_objects(self, objects: Sequence[ObjectInfo]) -> None:
        """What a kind checks of its listed files before a run; by default nothing more."""

    def _plan(self, listing: Listing, shards: Sequence[Shard], params: dict[str, Any]) -> SourcePlan:
        """The plan of ``shards``, made from ``listing``: its digest is the plan's snapshot."""
        digest = listing_digest(listing.objects)
        return SourcePlan(self.kind, self.identity, digest, tuple(shards), params, by_objects=True)

    def _list(self) -> Listing:
        listing = self._store.listing()
        if not listing.objects:
            raise SourceError(
                f"no {self.files} at {self.identity!r} ({listing.ignored} other objects ignored: only names "
                f"ending in {', '.join(self.suffixes)} are read); check the location: a wrong folder, glob "
                "or prefix?"
            )
        return listing

    def _check_plan(self, plan: SourcePlan) -> None:
        names = self.plan_fields
        given: tuple[Any, ...] = (plan.kind, plan.identity, *(plan.param(n) for n in names))
        mine = (self.kind, self.identity, *(self.params[n] for n in names))
        if given != mine:
            raise ConfigError(
                f"plan (kind, location, {', '.join(names)}) = {given} does not match this source's {mine}; "
                "read a plan with a source built with the same arguments as the one that planned it"
            )


def one_key_type(types: Iterable[str | None]) -> str | None:
    """``int`` or ``text`` for the results table's key, from each planned file's; None when none has one."""
    kinds = {t for t in types if t is not None}
    if len(kinds) > 1:
        raise SourceError(
            "the key column is an integer in some files and text in others; results need one key type, "
            "so write the key column with one type in every file"
        )
    return kinds.pop() if kinds else None


def is_new(obj: ObjectInfo, new_only: NewOnly | None) -> bool:
    """Whether an only-new plan reads ``obj``: its (key, ETag) is not one a completed run recorded."""
    return new_only is None or (obj.key, obj.etag) not in new_only.seen_objects


def new_only_params(new_only: NewOnly | None) -> dict[str, Any] | None:
    """What a plan records of the only-new rule it was made under."""
    if new_only is None:
        return None
    return {
        "model_version": new_only.model_version,
        "results_table": new_only.results_table,
        "seen_objects": len(new_only.seen_objects),
    }
