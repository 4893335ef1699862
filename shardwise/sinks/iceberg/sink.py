"""Results in an Apache Iceberg table (pyiceberg) of a SQL catalog, its files locally or on S3.

**Exactly once per chunk.** Each chunk is one Iceberg commit whose last
snapshot's summary carries the run, the shard, the chunk's number and its
record (position, merge counts; see :mod:`.commits`). :meth:`IcebergSink.commit`
loads the table, looks for that chunk among its snapshots, and commits only
if it is not there. The commit is exclusive: pyiceberg asks the catalog to
move the table's ``main`` branch from the snapshot this writer read to its
new one, and the SQL catalog swaps the table's metadata file only if it is
still the one read (``UPDATE ... WHERE metadata_location = <read>``). So
when another writer committed meanwhile (another shard, a racing attempt of
this chunk, the shard's seal), the commit fails with nothing visible, and
the sink loads the table again, looks again, and writes again or answers
``already``/``sealed``. Commits are serialised per table: shards take
turns, each try costing a load of the table's metadata. pyiceberg's own
retry of a lost commit (0.12: it re-applies the changes on the newer table,
unchecked) is turned off on the table (``commit.retry.num-retries`` 0, set by
:meth:`IcebergSink.ensure`; a commit refuses a table where it is not).

**Merge rule** (as the SQL and Delta sinks'): one row per (source_key,
model_version). A key already stored for the chunk's model version keeps its
row when the input fingerprint is the same, and gets the new row (lineage
included) when it differs; the other keys are inserted. pyiceberg has no
MERGE, and its ``upsert`` compares every column (a new ``scored_at`` would
count as a change), so the sink reads the chunk's keys as stored, then
commits one transaction: a delete of the changed keys' rows (copy-on-write:
the files holding them are rewritten without them) and an append of the
changed and new rows. The transaction is one catalog commit, checked as
above against the table version that was read, so its counts are exact. A
chunk with nothing to change is an empty append that carries its record
alone.

**A sealed shard takes no more chunks**: :meth:`IcebergSink.seal` commits an
empty snapshot at the next chunk's number, marked sealed, exclusively as a
chunk is, so a stale attempt's chunk there is answered ``sealed``.

**Faults.** Every call on the catalog or the table is retried on the run's
:class:`~shardwise.retry_policy.RetryPolicy`: a storage failure (a cut S3
answer) unless the bucket is missing or refused
(:func:`~shardwise.sinks.lake.bucket_refusal`, a :class:`ConfigError`), and
a catalog database failure as :mod:`shardwise.db.errors` classifies it. A
commit that keeps losing to other writers (:attr:`IcebergSink.commit_tries`
tries, with backoff) becomes a :class:`TransientError`, retried the same way.

**Files.** A writer killed before its catalog commit leaves data files no
snapshot lists, which readers never see; every commit writes a new metadata
file, of which the table keeps the last 20 (``write.metadata.*``, set on
tables this sink creates). Expire old snapshots and delete orphan files with
Iceberg's maintenance when no run writes (the records of expired snapshots
are gone: expire only those of runs that will not be resumed).

**A table grows.** Tables this sink creates carry the property ``shardwise.made=true``; such a table
gains (``update_schema().add_column``, before the run's first commit) the nullable output columns a
later run stores (``parsed`` from ``--json-schema`` after a run without it), which its earlier rows
read as null. A table without the property (the user's own) is never altered: the run is refused in
one line naming the columns.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import sqlalchemy as sa
from pyiceberg import expressions
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.types import LongType

from shardwise.db.errors import classify, safe_url
from shardwise.errors import ConfigError, TransientError
from shardwise.retry_policy import Outage, RetryPolicy, retry_step
from shardwise.sinks.base import Layout, SinkChunk, SinkCommit, last_per_key
from shardwise.sinks.iceberg.catalog import (
    catalog_url,
    has_catalog_tables,
    open_catalog,
    table_name,
    warehouse_uri,
)
from shardwise.sinks.iceberg.commits import landed, snapshot_properties
from shardwise.sinks.lake import (
    S3Settings,
    arrow_rows,
    arrow_schema,
    bucket_refusal,
    layout_refusal,
    rows_table,
    schema_differences,
    stored_fingerprints,
)
from shardwise.sources.base import KeyType

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

__all__ = ["IcebergSink"]

T = TypeVar("T")
_NO_REBASE = {"commit.retry.num-retries": "0"}
"""pyiceberg (0.12) retries a commit that lost a race by re-applying its changes on the table as it is
now, which would skip this sink's look for the chunk and its read of the stored keys: the sink retries
itself instead (:meth:`IcebergSink._once`), so its tables say 0."""
_MARK = {"shardwise.made": "true"}
"""The property of the tables this sink creates: such a table gains the nullable columns a later run
stores; a table without it (the user's own) is never altered."""
_PROPERTIES = {
    **_MARK,
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
    **_NO_REBASE,
}
_log = logging.getLogger(__name__)


class IcebergSink:
    """The Iceberg table ``namespace.table`` of a SQL catalog, its files under the warehouse
    ``location``; loaded afresh for each call, so one sink serves any number of threads.

    ``catalog`` is the ``--iceberg-catalog`` URL (None: the default of a local warehouse, see
    :mod:`shardwise.sinks.iceberg`); ``retry`` is the run's policy for failing calls.
    """

    def __init__(
        self,
        location: str,
        table: str,
        layout: Layout,
        *,
        catalog: str | None = None,
        s3: S3Settings | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._location = location.rstrip("/")
        self._ident = table_name(table)
        self._url = catalog_url(catalog, self._location)
        self._default_catalog = catalog is None
        self.layout = layout
        self.target = f"iceberg:{self._location}/{table}"
        self._schema = arrow_schema(layout)
        self._s3 = s3
        self._retry = retry or RetryPolicy()
        self._lock = threading.Lock()
        self._catalog: SqlCatalog | None = None
        self._closed = False
        self.commit_tries = 10

    @property
    def _bucket(self) -> str | None:
        if not self._location.startswith("s3://"):
            return None
        return self._location.removeprefix("s3://").partition("/")[0]

    def check(self) -> None:
        def look() -> None:
            found = self._find()
            if found is not None:
                self._check_table(found)

        self._retried(f"opening {self.target}", look)

    def ensure(self) -> None:
        found = self._retried(f"opening {self.target}", self._find_or_create)
        missing = self._check_table(found)
        if missing:
            self._retried(f"adding columns {', '.join(missing)} to {self.target}", lambda: self._add(missing))
            found = self._retried(f"opening {self.target}", self._table)
        if not _rebase_off(found):  # made by another tool, or changed since: see _NO_REBASE
            self._retried(f"setting {self.target}'s commit retries", lambda: self._no_rebase(found))

    def commit(self, chunk: SinkChunk) -> SinkCommit:
        data = rows_table(last_per_key(chunk.rows), chunk.lineage, self.layout, self._schema)
        what = f"committing chunk {chunk.number} of shard {chunk.shard_id} to {self.target}"
        return self._retried(
            what,
            lambda: self._once(
                chunk.run_id, chunk.shard_id, chunk.number, what, lambda t: self._write(t, data, chunk)
            ),
        )

    def seal(self, run_id: str, shard_id: int, number: int) -> SinkCommit:
        what = f"sealing shard {shard_id} at chunk {number} in {self.target}"
        return self._retried(
            what, lambda: self._once(run_id, shard_id, number, what, self._sealer(run_id, shard_id, number))
        )

    def committed(self, run_id: str, shard_id: int, number: int) -> SinkCommit | None:
        return self._retried(
            f"reading {self.target}", lambda: landed(self._table(), run_id, shard_id, number)
        )

    def committed_inputs(self, model_version: str) -> Iterator[tuple[str, str]]:
        found = self._retried(
            f"reading {self.target}",
            lambda: (
                self._table()
                .scan(
                    row_filter=_of_version(model_version),
                    selected_fields=("source_key", "input_fingerprint"),
                )
                .to_arrow()
            ),
        )
        keys, prints = found.column("source_key").to_pylist(), found.column("input_fingerprint").to_pylist()
        for key, fingerprint in zip(keys, prints, strict=True):
            yield str(key), fingerprint

    def stored_key_type(self) -> KeyType | None:
        found = self._retried(f"opening {self.target}", self._find)
        if found is None:
            return None
        return "int" if isinstance(found.schema().find_field("source_key").field_type, LongType) else "text"

    def tidy(self, over: Callable[[str], bool | None]) -> list[str]:
        """Nothing is deleted: a writer killed before its commit leaves data files that no snapshot lists,
        which readers never see; Iceberg's orphan-file maintenance removes them."""
        return []

    def finish(self, run_id: str) -> list[str]:
        """Nothing to do: each commit is complete, and old metadata files are dropped as it commits."""
        return []

    def read(self, model_version: str | None = None) -> list[dict[str, Any]]:
        def scan() -> pa.Table:
            table = self._table()
            if model_version is None:
                return table.scan().to_arrow()
            return table.scan(row_filter=_of_version(model_version)).to_arrow()

        found = self._retried(f"reading {self.target}", scan)
        found = found.sort_by([("source_key", "ascending"), ("model_version", "ascending")])
        return arrow_rows(found, self.layout)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            catalog, self._catalog = self._catalog, None
        if catalog is not None:
            catalog.engine.dispose()

    def _retried(self, what: str, call: Callable[[], T]) -> T:
        """``call()`` with pyiceberg's and the catalog's failures mapped, tried again on the run's policy
        while transient."""

        def once() -> T:
            with self._boundary(what):
                return call()

        return retry_step(once, what=what, outage=Outage(self._retry), reset=self._forget)

    @contextmanager
    def _boundary(self, what: str) -> Iterator[None]:
        """Map the failures of a step (``what``) onto the error tree: a lost commit race and a storage
        failure are transient (unless the bucket is missing or refused); a catalog database failure is
        what :func:`shardwise.db.errors.classify` says, transient when it cannot tell."""
        try:
            yield
        except CommitFailedException as exc:
            raise TransientError(f"Iceberg commit lost to concurrent writers while {what}: {exc}") from exc
        except sa.exc.SQLAlchemyError as exc:
            mapped = classify(exc, f"{what}: the Iceberg catalog", self._url, otherwise=TransientError)
            raise (mapped or TransientError(f"{what}: the Iceberg catalog failed")) from exc
        except OSError as exc:
            refused = None if self._bucket is None else bucket_refusal(self._bucket, self._s3)
            if refused is not None:
                raise refused from exc
            raise TransientError(f"Iceberg storage failed while {what}: {exc}; retrying may succeed") from exc

    def _forget(self) -> None:
        """Drop the catalog after a failure: the next try connects, and resolves S3 settings, afresh."""
        with self._lock:
            catalog, self._catalog = self._catalog, None
        if catalog is not None:
            catalog.engine.dispose()

    def _catalog_for(self, *, create: bool) -> SqlCatalog | None:
        """The catalog, opened once (made when ``create``); None when nothing made it yet."""
        if self._closed:
            raise ConfigError(f"sink {self.target} is closed; make a new one")
        with self._lock:
            if self._catalog is not None:
                return self._catalog
        if not create and self._default_catalog and not _catalog_file(self._url).exists():
            return None  # a local warehouse nobody wrote: check() creates nothing
        if create and self._default_catalog:
            _catalog_file(self._url).parent.mkdir(parents=True, exist_ok=True)
        catalog = open_catalog(self._url, self._location, self._s3, create=create)
        if not create and not has_catalog_tables(catalog):
            catalog.engine.dispose()
            return None
        with self._lock:
            if self._catalog is None:
                self._catalog = catalog
                return catalog
        catalog.engine.dispose()
        return self._catalog

    def _find(self) -> Table | None:
        catalog = self._catalog_for(create=False)
        if catalog is None:
            return None
        try:
            return catalog.load_table(self._ident)
        except NoSuchTableError:
            return None

    def _find_or_create(self) -> Table:
        catalog = self._catalog_for(create=True)
        assert catalog is not None
        with suppress(NamespaceAlreadyExistsError):
            catalog.create_namespace(self._ident[0])
        try:
            return catalog.create_table(self._ident, schema=self._schema, properties=_PROPERTIES)
        except TableAlreadyExistsError:  # made before, or by another process meanwhile
            return catalog.load_table(self._ident)

    def _table(self) -> Table:
        found = self._find()
        if found is None:
            raise ConfigError(f"Iceberg table {self.target} does not exist; call ensure() before committing")
        return found

    def _wanted(self) -> Schema:
        return Catalog._convert_schema_if_needed(self._schema)  # pyiceberg's own Arrow-to-Iceberg types

    def _check_table(self, table: Table) -> list[str]:
        """The nullable columns the table lacks, to add when this sink made it (:data:`_MARK`); a
        ConfigError for any other difference, and for those too on a table the user made."""
        ours = all(table.metadata.properties.get(k) == v for k, v in _MARK.items())
        problems, missing = schema_differences(_columns(table.schema()), _columns(self._wanted()), ours=ours)
        if problems:
            raise layout_refusal("Iceberg", self.target, problems, ours=ours)
        if not table.location().startswith(warehouse_uri(self._location) + "/"):
            raise ConfigError(
                f"Iceberg table {self.target}: the catalog ({safe_url(self._url)}) holds a table of that "
                "name in another warehouse; give --results that warehouse, or another --results-table"
            )
        return missing

    def _add(self, names: list[str]) -> None:
        """Add the nullable columns ``names`` the table lacks, unless a concurrent run added them first."""
        table = self._table()
        wanted = {f.name: f.field_type for f in self._wanted().fields}  # by name: its ids are not the table's
        have = {f.name for f in table.schema().fields}
        try:
            with table.update_schema() as update:
                for name in names:
                    if name not in have:
                        update.add_column(name, wanted[name])
        except CommitFailedException:
            self._add(names)  # another writer committed first; this looks again

    def _no_rebase(self, table: Table) -> None:
        try:
            with table.transaction() as transaction:
                transaction.set_properties(_NO_REBASE)
        except CommitFailedException:
            self._no_rebase(self._table())  # another writer committed first; this is idempotent

    def _once(
        self, run_id: str, shard_id: int, number: int, what: str, write: Callable[[Table], SinkCommit]
    ) -> SinkCommit:
        """Commit chunk ``number`` with ``write`` unless it landed; a commit that another writer's beat is
        tried again on the table as it is now, up to :attr:`commit_tries` times."""
        for attempt in range(1, self.commit_tries + 1):
            table = self._table()
            found = landed(table, run_id, shard_id, number)
            if found is not None:
                return found
            if not _rebase_off(table):
                raise ConfigError(
                    f"Iceberg table {self.target} has commit.retry.num-retries above 0 (set since the run "
                    "began), so pyiceberg would re-apply a chunk's commit unchecked; set it to 0 and resume"
                )
            try:
                return write(table)
            except CommitFailedException as exc:
                if attempt == self.commit_tries:
                    raise
                _log.info("Iceberg commit attempt %d lost while %s: %s", attempt, what, exc)
                time.sleep(random.uniform(0, min(2.0, 0.05 * 2**attempt)))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _write(self, table: Table, data: pa.Table, chunk: SinkChunk) -> SinkCommit:
        version = chunk.lineage.model_version
        existing = self._existing(table, data, version)
        keys, prints = data.column("source_key").to_pylist(), data.column("input_fingerprint").to_pylist()
        new = [existing.get(key) is None for key in keys]
        changed = [
            key
            for key, fingerprint in zip(keys, prints, strict=True)
            if existing.get(key) not in (None, fingerprint)
        ]
        inserted, updated = sum(new), len(changed)
        done = SinkCommit("written", dict(chunk.position), inserted, updated, len(keys) - inserted - updated)
        written = [
            is_new or existing[key] != fingerprint
            for key, fingerprint, is_new in zip(keys, prints, new, strict=True)
        ]
        with table.transaction() as transaction:
            if changed:
                transaction.delete(_x.And(_of_version(version), _x.In("source_key", changed)))
            transaction.append(
                data.filter(pa.array(written, pa.bool_())),
                snapshot_properties=snapshot_properties(chunk.run_id, chunk.shard_id, chunk.number, done),
            )
        return done

    def _sealer(self, run_id: str, shard_id: int, number: int) -> Callable[[Table], SinkCommit]:
        def seal(table: Table) -> SinkCommit:
            sealed = SinkCommit("sealed", {})
            table.append(
                self._schema.empty_table(),
                snapshot_properties=snapshot_properties(run_id, shard_id, number, sealed),
            )
            return sealed

        return seal

    def _existing(self, table: Table, data: pa.Table, model_version: str) -> dict[Any, str]:
        """Stored key → input fingerprint, for the chunk's keys under ``model_version``."""

        def scan(low: Any, high: Any) -> pa.Table:
            row_filter = _x.And(
                _of_version(model_version),
                _x.GreaterThanOrEqual("source_key", low),
                _x.LessThanOrEqual("source_key", high),
            )
            found = table.scan(row_filter=row_filter, selected_fields=("source_key", "input_fingerprint"))
            return found.to_arrow()

        return stored_fingerprints(data, scan)


_x: Any = expressions
"""pyiceberg's row filters; their pydantic constructors take positional arguments mypy does not see."""


def _of_version(model_version: str) -> Any:
    return _x.EqualTo("model_version", model_version)


def _rebase_off(table: Table) -> bool:
    return all(table.metadata.properties.get(k) == v for k, v in _NO_REBASE.items())


def _columns(schema: Schema) -> list[tuple[str, str, bool]]:
    return [(field.name, str(field.field_type), not field.required) for field in schema.fields]


def _catalog_file(url: str) -> Path:
    return Path(sa.make_url(url).database or "")
