"""CSV and JSON Lines files as a source: a local folder, glob or file, or an S3 prefix or object.

Files are listed and opened as every file kind's are
(:class:`~shardwise.sources.files.source.FileSource`: the same S3 client,
retries and ETag checks), and planned the way Parquet plans row groups: each
file's records (see :mod:`~shardwise.sources.csv_jsonl.parse`) are cut into
blocks of ``block_rows``, the blocks of the sorted files into shards
(:func:`~shardwise.sources.files.spans.cut`), so a shard is the same
spans of the same objects on every read, and the snapshot is the listing's
digest. The plan reads objects (``SourcePlan.by_objects``): only-new skips the
(object key, ETag) pairs a completed run saw, as for Parquet, and a watcher
announces new files.

Planning reads every listed file, seen ones too, because neither format has
footers: it counts the records and finds the keys that repeat. A repeated
key cannot name one result, so every row holding it is a dead letter (with
that key, redriven once the keys are unique); the plan lists the repeated
keys (``duplicate_keys``, at most :data:`MAX_REPEATED_KEYS`, more is refused)
so that every shard's read knows them.

A row without a readable key (its key missing, null or empty, or a line that
does not parse) cannot be a dead letter: a dead letter is found again and
redriven by its key (see :mod:`shardwise.pipeline.skipped`). As for a NULL
key in Parquet, it is not read: the plan counts a row without a key in
``null_keys`` (naming their files in ``null_key_objects``) and a line that
does not parse in ``unparsable_lines``, lists the first few places and
reasons of both (``unreadable_rows``), and planning logs them in a warning,
with the files' own warnings (a quoted value of many lines).
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Mapping, Sequence
from typing import Any, ClassVar

from shardwise.errors import ConfigError, InputError
from shardwise.retry_policy import RetryPolicy
from shardwise.sources.base import Key, NewOnly, Shard, SourcePlan, SourceRow, SourceValues
from shardwise.sources.csv_jsonl.parse import SUFFIXES, ParsedFile, Record, parse_file
from shardwise.sources.files.objects import ObjectInfo, relative_key
from shardwise.sources.files.source import FileSource, is_new, new_only_params, one_key_type
from shardwise.sources.files.spans import RowGroup, cut, shard_spans, to_shard
from shardwise.sources.sizing import Sizing

__all__ = ["DEFAULT_BLOCK_ROWS", "MAX_REPEATED_KEYS", "CsvJsonlSource"]

_log = logging.getLogger(__name__)
_SHOWN = 5

DEFAULT_BLOCK_ROWS = 1000
"""Records per block: the smallest piece a shard holds of a file."""
MAX_REPEATED_KEYS = 10_000
"""The most repeated keys a plan dead-letters; more is refused (the files' key is likely the wrong column)."""


class CsvJsonlSource(FileSource):
    """Plans and reads CSV and JSON Lines files; safe to share between threads."""

    kind = "csv"
    suffixes: ClassVar[tuple[str, ...]] = SUFFIXES
    files: ClassVar[str] = "CSV or JSON Lines files"

    def __init__(
        self,
        location: str,
        key: str = "id",
        text_column: str = "text",
        *,
        input_columns: Mapping[str, str] | None = None,
        s3_client: Any | None = None,
        retry: RetryPolicy | None = None,
        block_rows: int = DEFAULT_BLOCK_ROWS,
    ) -> None:
        self._read_columns(key, text_column, input_columns)
        if isinstance(block_rows, bool) or not isinstance(block_rows, int) or block_rows < 1:
            raise ConfigError(f"block_rows must be a positive integer; got {block_rows!r}")
        self.block_rows = block_rows
        super().__init__(location, s3_client, retry)

    def plan_sized(self, sizing: Sizing, new_only: NewOnly | None) -> SourcePlan:
        """The blocks of the files not seen yet (all with no ``new_only``), cut into shards."""
        listing = self._list()
        scans = [(obj, self._parse(obj)) for obj in listing.objects]
        planned = [(obj, parsed) for obj, parsed in scans if is_new(obj, new_only)]
        repeated = _repeated_keys(scans, self.key)
        groups = [group for obj, parsed in planned for group in self._blocks(obj, parsed.records)]
        shards = [to_shard(i, run) for i, run in enumerate(cut(groups, sizing))]
        rows = sum(g.rows for g in groups)
        unkeyed = [(obj, r) for obj, parsed in planned for r in parsed.records if not r.keyed]
        nulls = [obj for obj, r in unkeyed if r.skipped == "null_key"]
        if unkeyed:
            _log.warning(
                "%d rows of %s have no readable key (%d without a key, %d unparsable lines), so they are "
                "skipped (not scored, not dead letters): %s",
                len(unkeyed), self.identity, len(nulls), len(unkeyed) - len(nulls),
                "; ".join(str(r.value) for _, r in unkeyed[:_SHOWN]),
            )  # fmt: skip
        for _, parsed in planned:
            for warning in parsed.warnings:
                _log.warning("%s", warning)
        params = {
            **self.params,
            "key_type": one_key_type(parsed.key_type for _, parsed in planned),
            **sizing.params(rows),
            "objects": len(planned),
            "ignored_objects": listing.ignored,
            "block_rows": self.block_rows,
            "rows": rows,
            "null_keys": len(nulls),
            "null_keys_known": True,
            "null_key_objects": sorted({relative_key(self.identity, o.key) for o in nulls})[:_SHOWN],
            "unparsable_lines": len(unkeyed) - len(nulls),
            "unreadable_rows": [str(r.value) for _, r in unkeyed[:_SHOWN]],
            "duplicate_keys": repeated,
            "new_only": new_only_params(new_only),
            "skipped_objects": len(scans) - len(planned),
            "skipped_rows": sum(len(p.records) for o, p in scans if not is_new(o, new_only)),
        }
        return self._plan(listing, shards, params)

    def read_keys(self, keys: Sequence[Key]) -> Generator[SourceRow, None, None]:
        """The current rows whose key (or, for a dead letter without one, its place) is in ``keys``."""
        wanted = {str(k) for k in keys}
        if not wanted:
            return
        scans = [(obj, self._parse(obj)) for obj in self._list().objects]
        repeated = frozenset(_repeated_keys(scans, self.key))
        for _, parsed in scans:
            for record in parsed.records:
                if record.keyed and str(record.key) in wanted:
                    yield _row(record, repeated, self.key)

    def _check_objects(self, objects: Sequence[ObjectInfo]) -> None:
        """Fail now if a file cannot be read or lacks a column."""
        for obj in objects:
            self._parse(obj)

    def value_kind(self) -> SourceValues:
        """Text: the text column is read as text (CSV), or as the JSON value it holds (a non-text one is
        that row's dead letter)."""
        return SourceValues("text", f"text column {self.text_column!r} of {self.identity}", self.text_column)

    def _shard_rows(self, plan: SourcePlan, shard: Shard, skip: int) -> Generator[SourceRow, None, None]:
        """In the plan's fixed order: file, block, record."""
        repeated = frozenset(plan.param("duplicate_keys") or ())
        block = int(plan.param("block_rows"))
        for obj, first, stop in shard_spans(shard):
            records = [r for r in self._parse(obj).records[first * block : stop * block] if r.keyed]
            if skip >= len(records):
                skip -= len(records)
                continue
            for record in records[skip:]:
                yield _row(record, repeated, self.key)
            skip = 0

    def _parse(self, obj: ObjectInfo) -> ParsedFile:
        with self._store.open(obj) as handle:  # checks the object is the one listed
            data = handle.read()
        return parse_file(data, obj.key, relative_key(self.identity, obj.key), self.key, self.inputs)

    def _blocks(self, obj: ObjectInfo, records: Sequence[Record]) -> list[RowGroup]:
        """The file's records in blocks; a block's rows without a key are counted as its null keys."""
        size = self.block_rows
        blocks = [records[i : i + size] for i in range(0, len(records), size)]
        return [RowGroup(obj, i, len(b), sum(not r.keyed for r in b)) for i, b in enumerate(blocks)]


def _row(record: Record, repeated: frozenset[Any], key: str) -> SourceRow:
    """The record as a row; a row whose key repeats is a dead letter saying where it is."""
    if record.key in repeated:
        why = (
            f"key {record.key!r} of {record.place} is on more than one row of the files ({key!r} must name "
            "one row, so none of them is scored); make the keys unique, then redrive the run"
        )
        return SourceRow(record.key, InputError(why))
    return SourceRow(record.key, record.value)


def _repeated_keys(scans: Sequence[tuple[ObjectInfo, ParsedFile]], key: str) -> list[Any]:
    """The keys on more than one row of the files, sorted; too many is a :class:`ConfigError`."""
    counts: dict[Any, int] = {}
    for _, parsed in scans:
        for record in parsed.records:
            if record.keyed:
                counts[record.key] = counts.get(record.key, 0) + 1
    repeated = sorted((k for k, n in counts.items() if n > 1), key=lambda k: (str(type(k)), k))
    if len(repeated) > MAX_REPEATED_KEYS:
        raise ConfigError(
            f"{len(repeated):,} values of key column {key!r} are on more than one row of the files (e.g. "
            f"{repeated[0]!r}); a key must name one row: give the column that does as --key"
        )
    return repeated
