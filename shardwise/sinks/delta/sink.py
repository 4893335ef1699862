"""Results in a Delta Lake table (delta-rs, no JVM), in a local directory or on S3.

**Exactly once per chunk.** Every commit carries an app transaction
``shardwise:<run_id>:<shard_id>`` whose version is the chunk number + 1, and
the chunk's position and merge counts in its commit info (custom metadata
``shardwise``). A shard's chunks commit in order, so the chunk has landed
exactly when ``transaction_version(app_id) >= number + 1``; :meth:`DeltaSink.commit`
checks that first and then commits. delta-rs does not refuse a repeated
(app id, version) by itself, but when two writers race, the one whose log
entry comes second meets the winner's app transaction in its conflict check
and fails ("Concurrent transaction failed"); the sink then re-reads the
table, finds the chunk landed, and answers ``already`` with the stored
position and counts (read from the table's history: the rare path).

**Merge rule** (as the SQL sink's): one row per (source_key, model_version).
A key already stored for the chunk's model version keeps its row when the
input fingerprint is the same, and gets the new row (lineage included) when
it differs; the other keys are inserted. Every chunk is written as a MERGE
on (source_key, model_version), never as a blind append, because a MERGE's
commit is *conflict-checked*: delta-rs records what it read (the chunk's key
range under its model version, ``source_key BETWEEN min AND max AND
model_version = v``) and refuses the commit when a commit that landed after
that read added or removed files whose statistics overlap it (checked on
delta-rs 1.6: MERGE after MERGE, MERGE after append). So two runs that score
the same new keys at the same moment cannot both insert them: the second
commit fails, and the sink reads the keys again and merges again, now
finding them (the merge rule then keeps or replaces them). A blind append
would not be checked, which is how two runs once stored every key twice.
Shards of one run are disjoint key ranges, so their commits do not meet; a
shard whose keys interleave another's (a Parquet source of unsorted keys)
may lose a commit to it and try again. A MERGE that changes nothing writes
no commit, so a chunk whose keys are all stored unchanged is an empty
append that carries the app transaction alone. Counts come from the keys
read at the version the MERGE ran on, which its conflict check guarantees
nobody changed.

**A sealed shard takes no more chunks.** When an attempt has committed a
shard's last chunk, the chunk writer calls :meth:`DeltaSink.seal` before it
marks the shard done: an empty commit whose app transaction takes the next
chunk's version, with ``"sealed": true`` in its record. A stale attempt
(one that lost its lease and kept going) that then commits that chunk finds
its version taken and answers ``sealed``, writing nothing; if its commit
raced the seal, the two carry the same app id and the later one fails its
conflict check and looks again. If the stale chunk landed first, the seal
answers with that chunk's record, and the chunk writer marks it before
sealing after it.

**Concurrency rule.** A Delta commit is the exclusive creation of the next
``_delta_log/<version>.json``. Locally delta-rs creates it atomically; on S3
deltalake 1.6 writes it with a conditional PUT (``If-None-Match: *``) by
default (verified against moto 5.2.5, which answers the loser 412), so S3
needs no lock service and no ``AWS_S3_ALLOW_UNSAFE_RENAME`` (which is only
safe for a single writer). The store must support conditional writes: AWS S3
(since 2024), MinIO, moto do. A commit that keeps losing to other writers
(delta-rs retries 15 times itself, then this sink a few more with backoff)
becomes :class:`~shardwise.errors.TransientError`, which the caller retries.

**Faults.** Every call the sink makes on the table (opening it, bringing it
up to date, reading, committing) is retried on the run's
:class:`~shardwise.retry_policy.RetryPolicy` when the store fails (a cut
answer, a timeout), each call on a clock of its own, as S3 reads are; past
the deadline a :class:`~shardwise.errors.RetryDeadlineError` names the step.
A bucket that does not exist or refuses the credentials is a
:class:`~shardwise.errors.ConfigError` naming it (see
:func:`~shardwise.sinks.lake.bucket_refusal`), found on the first call:
before a run starts, its checks open the table. So is a table delta-rs
refuses to read (any other ``DeltaError``): a corrupt log (a commit file in
``_delta_log`` cut short or overwritten, which is not JSON) names the table
and how to repair it, and is never retried, since retrying cannot mend it. delta-rs's error text is
shown with its terminal colours removed, its lines joined, and the causes
that quote a URL or an XML answer (they name the location) left out.

**A table grows.** Tables this sink creates carry the description "results table made by Shardwise"
(delta-rs refuses configuration keys outside Delta's own); such a table gains
(``DeltaTable.alter.add_columns``, before the run's first commit) the nullable output columns a later
run stores (``parsed`` from ``--json-schema`` after a run without it), which its earlier rows read as
null. A table without that description (the user's own) is never altered: the run is refused in one
line naming the columns.

**Checkpoints.** delta-rs's post-commit hook writes a checkpoint every
``delta.checkpointInterval`` commits (100; set on tables this sink creates),
so log replay stays short although every chunk is a commit; :meth:`finish`
has nothing left to do. Small files accumulate one per chunk: compact them
with ``DeltaTable.optimize.compact()`` when no run writes (see the docs).
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, Schema, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, DeltaProtocolError, TableNotFoundError

from shardwise.errors import ConfigError, TransientError
from shardwise.retry_policy import Outage, retry_step
from shardwise.sinks.base import SinkChunk, SinkCommit, last_per_key
from shardwise.sinks.delta.commits import app_id, commit_properties, stored_commit
from shardwise.sinks.lake import (
    LakeSink,
    arrow_rows,
    layout_refusal,
    refuse_other_format,
    rows_table,
    s3_storage_options,
    schema_differences,
    stored_fingerprints,
)
from shardwise.sources.base import KeyType

__all__ = ["DeltaSink", "app_id", "delta_text"]

T = TypeVar("T")
_CONFIGURATION = {"delta.checkpointInterval": "100"}
_MARK = "results table made by Shardwise"
"""The description of the tables this sink creates: such a table gains the nullable columns a later run
stores (delta-rs refuses configuration keys outside Delta's own, so the mark is the table's description)."""
_MATCH = "t.source_key = s.source_key AND t.model_version = s.model_version"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_BACKTRACE = re.compile(r"^(\d+: |at )")
"""A line of the Rust backtrace delta-rs appends to some errors (``0: <unknown>``, ``at ./nptl/...``)."""
_log = logging.getLogger(__name__)


def delta_text(exc: BaseException) -> str:
    """delta-rs's error text on one line: terminal colour codes removed, its chain of causes joined.

    A cause that quotes a request (``Error performing GET http://...``) or an answer's XML body is
    left out: those name the table's resolved location, which a sink targeted by reference
    (``env:NAME``) must not show.
    """
    lines = (line.strip().lstrip("\u21b3").strip() for line in _ANSI.sub("", str(exc)).splitlines())
    kept = [
        line
        for line in lines
        if line and "://" not in line and not line.startswith("<") and not _BACKTRACE.match(line)
    ]
    return " <- ".join(kept) or type(exc).__name__


@contextmanager
def _boundary(
    what: str, target: str, refusal: Callable[[], ConfigError | None] | None = None
) -> Iterator[None]:
    """Map delta-rs and object-store failures onto the error tree (``what`` names the step, ``target``
    the table).

    A storage failure is transient unless ``refusal`` (asked only then) says the bucket is missing or
    refused, which retrying cannot mend. A table delta-rs refuses to read is a
    :class:`ConfigError` (:func:`_unreadable`).
    """
    try:
        yield
    except CommitFailedError as exc:
        raise TransientError(
            f"Delta commit lost to concurrent writers while {what}: {delta_text(exc)}"
        ) from exc
    except DeltaError as exc:  # DeltaProtocolError and SchemaMismatchError are DeltaErrors too
        raise _unreadable(what, target, exc) from exc
    except OSError as exc:
        refused = refusal() if refusal is not None else None
        if refused is not None:
            raise refused from exc
        raise TransientError(
            f"Delta storage failed while {what}: {delta_text(exc)}; retrying may succeed"
        ) from exc


def _unreadable(what: str, target: str, exc: BaseException) -> ConfigError:
    """The one line for a table delta-rs refuses: a corrupt log (a commit that is not JSON), a protocol
    this deltalake cannot read or write, or another refusal, each with its fix. None is transient."""
    detail = delta_text(exc)
    if isinstance(exc, DeltaProtocolError):
        fix = "upgrade deltalake (pip install -U 'shardwise[delta]'), or give --results-table a new table"
        return ConfigError(
            f"Delta table {target} needs a Delta protocol this deltalake lacks ({detail}); {fix}"
        )
    if "json" in detail.lower():
        return ConfigError(
            f"Delta table {target} has a corrupt log: a commit file in its _delta_log is not valid JSON "
            f"(cut short or overwritten: {detail}), found while {what}; restore that file from a backup or "
            "the store's object versions, or give --results-table a new table; retrying cannot mend it"
        )
    return ConfigError(
        f"delta-rs refused {what}: {detail}; repair Delta table {target} (or move it aside), or give "
        "--results-table a new table"
    )


_COMPARE = {"=": pc.equal, ">=": pc.greater_equal, "<=": pc.less_equal}


def _scan(table: DeltaTable, columns: list[str] | None, filters: list[tuple[str, str, Any]]) -> pa.Table:
    """``columns`` (None: all) of the rows matching every ``(column, op, value)`` of ``filters``.

    No filter reaches pyarrow's scan: delta-rs 1.6 writes its Parquet files' strings as ``string_view``,
    and pyarrow 26, pushing a filter down to such a file, finds no kernel comparing the table's
    ``string`` with ``string_view`` (``ArrowNotImplementedError``). So delta-rs picks the files that
    may hold matches from their statistics in the log, and the rows read are filtered here.
    """
    wanted = None if columns is None else list(dict.fromkeys([*columns, *(name for name, _, _ in filters)]))
    found = table.to_pyarrow_dataset(file_pruning_predicate=filters or None).to_table(columns=wanted)
    for name, op, value in filters:
        scalar = pa.scalar(value, found.schema.field(name).type)
        found = found.filter(_COMPARE[op](found.column(name), scalar))
    return found if columns is None else found.select(columns)


def _type_name(kind: Any) -> str:
    element = getattr(kind, "element_type", None)
    if element is not None:
        return f"array<{_type_name(element)}>"
    return str(getattr(kind, "type", kind))


def _columns(schema: Schema) -> list[tuple[str, str, bool]]:
    return [(f.name, _type_name(f.type), bool(f.nullable)) for f in schema.fields]


class DeltaSink(LakeSink):
    """A Delta table at ``<location>/<table>``; one table handle per thread, refreshed per use.

    ``retry`` is the run's policy: how long a failing call on the table is
    tried again (see the module docstring).
    """

    kind = "delta"
    commit_tries = 6

    def _handles(self) -> None:
        self._local = threading.local()

    def check(self) -> None:
        found = self._retried(f"opening {self.target}", self._open)
        if found is not None:
            self._missing(found)
        else:
            refuse_other_format(self._where, "delta", self.target, self._s3)

    def ensure(self) -> None:
        found = self._retried(f"opening {self.target}", self._open_or_create)
        missing = self._missing(found)
        if missing:
            fields = [f for f in Schema.from_arrow(self._schema).fields if f.name in missing]
            self._retried(f"adding columns {', '.join(missing)} to {self.target}", lambda: self._add(fields))

    def commit(self, chunk: SinkChunk) -> SinkCommit:
        app, version = app_id(chunk.run_id, chunk.shard_id), chunk.number + 1
        data = rows_table(last_per_key(chunk.rows), chunk.lineage, self.layout, self._schema)
        what = f"committing chunk {chunk.number} of shard {chunk.shard_id} to {self.target}"
        return self._retried(
            what,
            lambda: self._once(app, version, what, lambda t: self._write(t, data, chunk, app, version)),
        )

    def seal(self, run_id: str, shard_id: int, number: int) -> SinkCommit:
        app, version = app_id(run_id, shard_id), number + 1
        what = f"sealing shard {shard_id} at chunk {number} in {self.target}"

        def seal(table: DeltaTable) -> SinkCommit:
            return self._seal(table, app, version)

        return self._retried(what, lambda: self._once(app, version, what, seal))

    def committed(self, run_id: str, shard_id: int, number: int) -> SinkCommit | None:
        def find() -> SinkCommit | None:
            table = self._table()
            app = app_id(run_id, shard_id)
            if (table.transaction_version(app) or 0) < number + 1:
                return None
            return self._stored(table, app, number + 1, {})

        return self._retried(f"reading {self.target}", find)

    def committed_inputs(self, model_version: str) -> Iterator[tuple[str, str]]:
        found = self._retried(
            f"reading {self.target}",
            lambda: _scan(
                self._table(), ["source_key", "input_fingerprint"], [("model_version", "=", model_version)]
            ),
        )
        for key, fingerprint in zip(found.column(0).to_pylist(), found.column(1).to_pylist(), strict=True):
            yield str(key), fingerprint

    def stored_key_type(self) -> KeyType | None:
        found = self._retried(f"opening {self.target}", self._open)
        if found is None:
            return None
        types = {name: kind for name, kind, _ in _columns(found.schema())}
        return "int" if types.get("source_key") in ("long", "integer") else "text"

    def tidy(self, over: Callable[[str], bool | None]) -> list[str]:
        """Nothing is deleted: a writer killed before its commit leaves data files that no commit in the
        log adds, which readers never see. ``DeltaTable.vacuum()`` removes them (see docs/how-to/lake.md)."""
        return []

    def finish(self, run_id: str) -> list[str]:
        """Nothing to do: delta-rs checkpoints as it commits (see the module docstring)."""
        self._retried(f"reading {self.target}", self._table)
        return []

    def read(self, model_version: str | None = None) -> list[dict[str, Any]]:
        filters = [] if model_version is None else [("model_version", "=", model_version)]
        found = self._retried(f"reading {self.target}", lambda: _scan(self._table(), None, filters))
        found = found.sort_by([("source_key", "ascending"), ("model_version", "ascending")])
        return arrow_rows(found, self.layout)

    def close(self) -> None:
        self._closed = True
        self._local = threading.local()

    def _retried(self, what: str, call: Callable[[], T]) -> T:
        """``call()`` with delta-rs's failures mapped, tried again on the run's policy while transient."""

        def once() -> T:
            with _boundary(what, self.target, self._refusal):
                return call()

        return retry_step(once, what=what, outage=Outage(self._retry), reset=self._forget)

    def _forget(self) -> None:
        """Drop this thread's handle after a failure: the next try opens the table afresh."""
        self._local.table = None

    def _options(self) -> dict[str, str] | None:
        return s3_storage_options(self._s3) if self._where.bucket is not None else None

    def _open(self) -> DeltaTable | None:
        try:
            return DeltaTable(self._where.uri, storage_options=self._options())
        except TableNotFoundError:
            return None

    def _open_or_create(self) -> DeltaTable:
        found = self._open()
        if found is not None:
            return found
        refuse_other_format(self._where, "delta", self.target, self._s3)
        try:
            DeltaTable.create(
                self._where.uri,
                self._schema,
                name=self._where.table,
                description=_MARK,
                configuration=_CONFIGURATION,
                storage_options=self._options(),
            )
        except DeltaError as exc:  # another process created it first; the open below checks it
            _log.info("creating %s: %s; opening the table made meanwhile", self.target, delta_text(exc))
        found = self._open()
        if found is None:
            raise TransientError(f"Delta table {self.target} was neither created nor found; try again")
        return found

    def _table(self) -> DeltaTable:
        """This thread's handle on the table, brought up to its latest version."""
        if self._closed:
            raise ConfigError(f"sink {self.target} is closed; make a new one")
        table: DeltaTable | None = getattr(self._local, "table", None)
        if table is not None:
            table.update_incremental()
            return table
        table = self._open()
        if table is None:
            raise ConfigError(f"Delta table {self.target} does not exist; call ensure() before committing")
        self._local.table = table
        return table

    def _once(
        self, app: str, version: int, what: str, write: Callable[[DeltaTable], SinkCommit]
    ) -> SinkCommit:
        """Write ``(app, version)`` with ``write`` unless it landed; a commit that loses a conflict check
        is tried again on the table as it is now, up to :attr:`commit_tries` times."""
        for attempt in range(1, self.commit_tries + 1):
            table = self._table()
            if (table.transaction_version(app) or 0) >= version:
                return self._stored(table, app, version, {})
            try:
                return write(table)
            except CommitFailedError as exc:
                if attempt == self.commit_tries:
                    raise
                _log.info("Delta commit attempt %d lost while %s: %s", attempt, what, delta_text(exc))
                self._forget()
                time.sleep(random.uniform(0, min(2.0, 0.05 * 2**attempt)))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _missing(self, table: DeltaTable) -> list[str]:
        """The nullable columns the table lacks, to add when this sink made it (:data:`_MARK`); a
        ConfigError for any other difference, and for those too on a table the user made."""
        ours = table.metadata().description == _MARK
        wanted = _columns(Schema.from_arrow(self._schema))
        problems, missing = schema_differences(_columns(table.schema()), wanted, ours=ours)
        if problems:
            raise layout_refusal("Delta", self.target, problems, ours=ours)
        return missing

    def _add(self, fields: list[Any]) -> None:
        """Add the nullable ``fields`` the table lacks, unless a concurrent run added them first."""
        table = self._open()
        assert table is not None  # ensure() opened or made it
        have = {f.name for f in table.schema().fields}
        wanted = [f for f in fields if f.name not in have]
        if wanted:
            table.alter.add_columns(wanted)

    def _write(
        self, table: DeltaTable, data: pa.Table, chunk: SinkChunk, app: str, version: int
    ) -> SinkCommit:
        existing = self._existing(table, data, chunk.lineage.model_version)
        inserted = updated = 0
        keys, prints = data.column("source_key").to_pylist(), data.column("input_fingerprint").to_pylist()
        for key, fingerprint in zip(keys, prints, strict=True):
            stored = existing.get(key)
            inserted += stored is None
            updated += stored is not None and stored != fingerprint
        done = SinkCommit("written", dict(chunk.position), inserted, updated, len(keys) - inserted - updated)
        props = commit_properties(app, version, done)
        if inserted or updated:
            # A MERGE, never a blind append: its commit is conflict-checked against the version read
            # above, so it changes exactly what that read says, and it commits.
            merger = table.merge(
                data, _MATCH, source_alias="s", target_alias="t", streamed_exec=False, commit_properties=props
            )
            merger.when_matched_update_all(predicate="t.input_fingerprint <> s.input_fingerprint")
            merger.when_not_matched_insert_all().execute()
            return done
        # Nothing to change, and a MERGE that changes nothing commits nothing: the app transaction alone.
        write_deltalake(table, data.slice(0, 0), mode="append", commit_properties=props)
        return done

    def _seal(self, table: DeltaTable, app: str, version: int) -> SinkCommit:
        sealed = SinkCommit("sealed", {})
        props = commit_properties(app, version, sealed)
        write_deltalake(table, self._schema.empty_table(), mode="append", commit_properties=props)
        return sealed

    def _existing(self, table: DeltaTable, data: pa.Table, model_version: str) -> dict[Any, str]:
        """Stored key → input fingerprint, for the chunk's keys under ``model_version``."""

        def scan(low: Any, high: Any) -> pa.Table:
            filters = [
                ("model_version", "=", model_version),
                ("source_key", ">=", low),
                ("source_key", "<=", high),
            ]
            return _scan(table, ["source_key", "input_fingerprint"], filters)

        return stored_fingerprints(data, scan)

    def _stored(self, table: DeltaTable, app: str, version: int, fallback: Mapping[str, Any]) -> SinkCommit:
        """The record of the commit that carried (app, version), from the table's history."""
        found = stored_commit(table, app, version)
        if found is None:
            _log.warning(
                "%s: commit info of %s version %d is gone from the log history", self.target, app, version
            )
            return SinkCommit("already", dict(fallback))
        return found
