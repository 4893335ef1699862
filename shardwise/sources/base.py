"""What every source adapter gives the pipeline: a deterministic shard plan, and streamed rows.

A plan is a pure function of (source snapshot, plan parameters). It is stored
with the run as JSON, and a resumed run re-reads the stored plan instead of
planning again, so shard boundaries never move under a run.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from shardwise.closing import Closing
from shardwise.errors import ConfigError
from shardwise.sources.sizing import Sizing

__all__ = [
    "Key",
    "KeyType",
    "NewOnly",
    "ReadFrom",
    "Shard",
    "ShardReader",
    "Source",
    "SourcePlan",
    "SourceRow",
    "SourceValues",
    "ValueKind",
]

Key = int | str
"""A source row's key: an integer or text primary key (SQL), or a key column value (Parquet)."""

KeyType = Literal["int", "text"]
"""What kind of key a source has: one vocabulary for sources, plans (``key_type``) and results tables."""


@dataclass(frozen=True, slots=True)
class SourceRow:
    """One row to score. ``value`` is normally text; the engine checks it, so it may be anything."""

    key: Key
    value: Any


@dataclass(frozen=True, slots=True)
class Shard:
    """One unit of work. ``bounds`` is JSON-able and only the source that planned it reads it.

    SQL: ``{"lo": key or None, "hi": key or None}`` meaning ``lo <= key < hi``
    (``None`` = unbounded; the last shard has ``hi = None``).
    Parquet: ``{"spans": [{"path": ..., "etag": ..., "size": ..., "row_groups": [first, stop]}]}``.
    """

    shard_id: int
    expected_rows: int
    bounds: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"shard_id": self.shard_id, "expected_rows": self.expected_rows, "bounds": dict(self.bounds)}


@dataclass(frozen=True, slots=True)
class NewOnly:
    """Restrict a plan to rows that have no result yet for ``model_version``, or whose input changed.

    SQL sources anti-join ``results_table`` in the source database. Parquet
    sources skip objects whose (object key, ETag) the ledger already saw:
    ``seen_objects`` holds those pairs.
    """

    model_version: str
    results_table: str
    seen_objects: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class SourcePlan:
    """The stored shard plan of a run."""

    kind: str
    """The registry name of the source kind that made it (``sql``, ``parquet``, ``images``, ``csv``...): a
    worker reopens that kind (see :mod:`shardwise.sources.registry`)."""
    identity: str
    """Where the rows come from, with any password or secret removed, e.g. ``postgresql://root@host/db#public.docs``."""
    snapshot: str | None
    """What state was read: a PostgreSQL snapshot id, or a digest of the Parquet listing (keys and ETags)."""
    shards: tuple[Shard, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    """The plan parameters (key and text columns, filter, shard sizing, only-new) as given."""
    by_objects: bool = False
    """Whether the plan reads whole objects (files) named in its shards' spans, so that a completed run
    records them as seen and only-new skips them (:func:`~shardwise.sources.plan_objects`)."""

    @property
    def expected_rows(self) -> int:
        return sum(s.expected_rows for s in self.shards)

    def param(self, name: str) -> Any:
        """A recorded parameter. ``input_columns`` of a plan stored before it existed comes from the
        ``text_pair_column`` such plans recorded instead, so that runs planned then still resume."""
        if name == "input_columns" and name not in self.params:
            pair = self.params.get("text_pair_column")
            return [] if pair is None else [pair]
        return self.params.get(name)

    def to_json(self) -> str:
        return json.dumps(
            {
                "kind": self.kind,
                "by_objects": self.by_objects,
                "identity": self.identity,
                "snapshot": self.snapshot,
                "params": dict(self.params),
                "shards": [s.to_dict() for s in self.shards],
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> SourcePlan:
        data = json.loads(text)
        shards = tuple(Shard(s["shard_id"], s["expected_rows"], s["bounds"]) for s in data["shards"])
        kind, params = data["kind"], data["params"]
        # Plans stored before the source registry: an image folder planned as a Parquet plan with an
        # ``images`` param, and only Parquet plans read objects.
        legacy = "by_objects" not in data
        if legacy and kind == "parquet" and params.get("images"):
            kind = "images"
        by_objects = data.get("by_objects", legacy and kind in ("parquet", "images"))
        return cls(kind, data["identity"], data["snapshot"], shards, params, by_objects)


ValueKind = Literal["text", "image", "bytes"]
"""What a source's rows hold: texts (a text column, or a binary one holding UTF-8 text), pictures (an
image column or an image folder), or bytes that are not text (a binary column of pictures, read as text)."""


@dataclass(frozen=True, slots=True)
class SourceValues:
    """What a source's rows hold, as the source can tell before planning; the pipeline checks that the
    model takes it (:mod:`shardwise.pipeline.model_inputs`)."""

    kind: ValueKind
    what: str
    """The values read, for a message: ``text column 'body' of sqlite:///app.db#docs``."""
    column: str | None
    """The column they come from; None for an image folder, whose rows are files."""
    detail: str = ""
    """For ``bytes``: the column's type and what its sampled values hold (``16 PNG``)."""

    def __post_init__(self) -> None:
        if self.kind not in get_args(ValueKind):
            raise ConfigError(f"kind must be one of {', '.join(get_args(ValueKind))}; got {self.kind!r}")


@dataclass(frozen=True, slots=True)
class ReadFrom:
    """Where a shard's read starts: after its first ``rows`` rows, the last of which had key ``key``.

    A retried or resumed attempt reads only what its shard has not committed.
    The default reads the shard from its start.
    """

    rows: int = 0
    key: Key | None = None


@dataclass(frozen=True, slots=True)
class ShardReader:
    """One shard being read, and the snapshot its rows come from, for lineage."""

    shard: Shard
    snapshot: str | None
    """The plan's snapshot; a fresh ``pg_current_snapshot()`` when ``snapshot_lost``; None on SQLite."""
    snapshot_lost: bool
    """True when the plan's snapshot was gone and the rows come from a fresh snapshot instead."""
    rows: Iterator[SourceRow]
    """The shard's rows in the source's fixed order; valid inside the ``open_reader`` block only."""


class Source(Closing):
    """A table or dataset that can be planned into shards and read shard by shard.

    The one interface the pipeline uses: it never asks which kind of source it
    holds. Implementations are safe to share between threads: a read opens its
    own connection or file handles per call. A source is a context manager
    that closes itself.
    """

    kind: str
    """The registry name of this source's kind (:mod:`shardwise.sources.registry`); its plans carry it."""
    identity: str
    plans_by_objects: bool = False
    """Whether plans read whole objects (files) and only-new skips the objects a completed run saw (by key
    and ETag), instead of comparing rows' results."""
    fingerprints_in_database: bool = True
    """Whether a SQL source's only-new can compare input fingerprints in its database (an anti-join).

    False for an image column of references: their fingerprint is the MD5 of
    the fetched bytes, so the pipeline compares in Python instead.
    """

    @property
    @abstractmethod
    def params(self) -> dict[str, Any]:
        """What this source reads (key, text columns, filter, key type when known); a plan records it."""

    def plan(
        self,
        *,
        shards: int | None = None,
        rows_per_shard: int | None = None,
        new_only: NewOnly | None = None,
        min_shards: int = 1,
    ) -> SourcePlan:
        """Cut the source into shards: exactly ``shards``, or about ``rows_per_shard`` rows each.

        With neither, the default of :class:`~shardwise.sources.sizing.Sizing`
        applies, cutting at least ``min_shards`` shards where the rows allow.
        ``new_only`` restricts the plan to rows without a current result.
        """
        return self.plan_sized(Sizing(shards, rows_per_shard, min_shards), new_only)

    @abstractmethod
    def plan_sized(self, sizing: Sizing, new_only: NewOnly | None) -> SourcePlan:
        """:meth:`plan`, with the sizing rule already checked: what each kind of source implements."""

    @abstractmethod
    def check(self) -> None:
        """Fail now, cheaply, if planning could not read the source: a filter that does not run, a
        location that does not exist, credentials that are refused. Nothing is planned or held."""

    @abstractmethod
    def value_kind(self) -> SourceValues:
        """What the rows' values are (texts, pictures, or bytes that are not text), so that a model that
        cannot take them is refused before anything runs; cheap: a type from the schema, and for a
        binary column read as text a sample of a few values' first bytes."""

    @abstractmethod
    def open_reader(
        self, plan: SourcePlan, shard: Shard, start: ReadFrom = ReadFrom()
    ) -> AbstractContextManager[ShardReader]:
        """Read one shard from ``start``, in memory that stays flat in the shard's size: the pipeline's read.

        SQL sources yield rows ordered by key, and resume after ``start.key``;
        Parquet sources in file order (object key, row group, row), since
        sorting would hold the shard in memory, and resume ``start.rows`` rows
        in, passing whole row groups over by their footers' counts. The reader
        says which snapshot the rows come from, for lineage. Leaving the block
        closes the read.
        """

    def read(self, plan: SourcePlan, shard: Shard) -> Iterator[SourceRow]:
        """The rows of :meth:`open_reader` from the shard's start, as an iterator (inspection, tests)."""
        with self.open_reader(plan, shard) as reader:
            yield from reader.rows

    @abstractmethod
    def read_keys(self, keys: Sequence[Key]) -> Generator[SourceRow, None, None]:
        """Stream the current rows whose key is in ``keys`` (a redrive); absent keys are not yielded.

        A generator: closing it early frees the connection or file it reads.
        """

    @abstractmethod
    def close(self) -> None:
        """Release connections, and the planning snapshot if one is held."""
