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
The chunk's keys that already exist for its model version are read first (a
filtered read of two columns; file statistics prune it to the files of the
chunk's key range, and shards are key ranges). None: a plain append, which
never conflicts with other shards' appends. Some: a MERGE that updates a
matched row only when its input fingerprint differs and inserts the rest.
A MERGE that changes nothing writes no commit, so an empty append then
carries the app transaction. Two *runs* of one model version appending the
same new keys at the same moment can both append (the SQL sink's primary
key would stop the second); within a run, shards never share keys.

**Concurrency rule.** A Delta commit is the exclusive creation of the next
``_delta_log/<version>.json``. Locally delta-rs creates it atomically; on S3
deltalake 1.6 writes it with a conditional PUT (``If-None-Match: *``) by
default (verified against moto 5.2.5, which answers the loser 412), so S3
needs no lock service and no ``AWS_S3_ALLOW_UNSAFE_RENAME`` (which is only
safe for a single writer). The store must support conditional writes: AWS S3
(since 2024), MinIO, moto do. A commit that keeps losing to other writers
(delta-rs retries 15 times itself, then this sink a few more with backoff)
becomes :class:`~shardwise.errors.TransientError`, which the caller retries.

**Checkpoints.** delta-rs's post-commit hook writes a checkpoint every
``delta.checkpointInterval`` commits (100; set on tables this sink creates),
so log replay stays short although every chunk is a commit; :meth:`finish`
has nothing left to do. Small files accumulate one per chunk: compact them
with ``DeltaTable.optimize.compact()`` when no run writes (see the docs).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, Schema, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from shardwise.errors import ConfigError, TransientError
from shardwise.sinks.base import Layout, SinkChunk, SinkCommit, last_per_key
from shardwise.sinks.delta_commits import app_id, commit_properties, stored_commit
from shardwise.sinks.lake import (
    LakeLocation,
    S3Settings,
    arrow_rows,
    arrow_schema,
    refuse_other_format,
    rows_table,
    s3_storage_options,
    schema_differences,
)
from shardwise.sources.base import KeyType

__all__ = ["DeltaSink", "app_id"]

_CONFIGURATION = {"delta.checkpointInterval": "100"}
_MATCH = "t.source_key = s.source_key AND t.model_version = s.model_version"
_log = logging.getLogger(__name__)


@contextmanager
def _boundary(what: str) -> Iterator[None]:
    """Map delta-rs and object-store failures onto the error tree (``what`` names the step)."""
    try:
        yield
    except CommitFailedError as exc:
        raise TransientError(f"Delta commit lost to concurrent writers while {what}: {exc}") from exc
    except OSError as exc:
        raise TransientError(f"Delta storage failed while {what}: {exc}; retrying may succeed") from exc


def _type_name(kind: Any) -> str:
    element = getattr(kind, "element_type", None)
    if element is not None:
        return f"array<{_type_name(element)}>"
    return str(getattr(kind, "type", kind))


def _columns(schema: Schema) -> list[tuple[str, str, bool]]:
    return [(f.name, _type_name(f.type), bool(f.nullable)) for f in schema.fields]


class DeltaSink:
    """A Delta table at ``<location>/<table>``; one table handle per thread, refreshed per use."""

    def __init__(self, location: str, table: str, layout: Layout, *, s3: S3Settings | None = None) -> None:
        self._where = LakeLocation(location, table)
        self.layout = layout
        self.target = f"delta:{location.rstrip('/')}/{table}"
        self._schema = arrow_schema(layout)
        self._s3 = s3
        self._local = threading.local()
        self._closed = False
        self.commit_tries = 6

    def check(self) -> None:
        with _boundary(f"opening {self.target}"):
            found = self._open()
        if found is not None:
            self._check_schema(found)
        else:
            refuse_other_format(self._where, "delta", self.target, self._s3)

    def ensure(self) -> None:
        with _boundary(f"opening {self.target}"):
            found = self._open()
            if found is None:
                refuse_other_format(self._where, "delta", self.target, self._s3)
                try:
                    DeltaTable.create(
                        self._where.uri,
                        self._schema,
                        name=self._where.table,
                        configuration=_CONFIGURATION,
                        storage_options=self._options(),
                    )
                except DeltaError as exc:  # another process created it first; the open below checks it
                    _log.info("creating %s: %s; opening the table made meanwhile", self.target, exc)
                found = self._open()
        if found is None:
            raise TransientError(f"Delta table {self.target} was neither created nor found; try again")
        self._check_schema(found)

    def commit(self, chunk: SinkChunk) -> SinkCommit:
        app, version = app_id(chunk.run_id, chunk.shard_id), chunk.number + 1
        data = rows_table(last_per_key(chunk.rows), chunk.lineage, self.layout, self._schema)
        what = f"committing chunk {chunk.number} of shard {chunk.shard_id} to {self.target}"
        for attempt in range(1, self.commit_tries + 1):
            with _boundary(what):
                table = self._table()
                if (table.transaction_version(app) or 0) >= version:
                    return self._stored(table, app, version, chunk.position)
                try:
                    return self._write(table, data, chunk, app, version)
                except CommitFailedError as exc:
                    if attempt == self.commit_tries:
                        raise
                    _log.warning("Delta commit attempt %d failed while %s: %s", attempt, what, exc)
                    self._local.table = None
                    time.sleep(random.uniform(0, min(2.0, 0.05 * 2**attempt)))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def committed(self, run_id: str, shard_id: int, number: int) -> SinkCommit | None:
        with _boundary(f"reading {self.target}"):
            table = self._table()
            app = app_id(run_id, shard_id)
            if (table.transaction_version(app) or 0) < number + 1:
                return None
            return self._stored(table, app, number + 1, {})

    def committed_inputs(self, model_version: str) -> Iterator[tuple[str, str]]:
        with _boundary(f"reading {self.target}"):
            found = self._table().to_pyarrow_table(
                columns=["source_key", "input_fingerprint"], filters=[("model_version", "=", model_version)]
            )
        for key, fingerprint in zip(found.column(0).to_pylist(), found.column(1).to_pylist(), strict=True):
            yield str(key), fingerprint

    def stored_key_type(self) -> KeyType | None:
        with _boundary(f"opening {self.target}"):
            found = self._open()
        if found is None:
            return None
        types = {name: kind for name, kind, _ in _columns(found.schema())}
        return "int" if types.get("source_key") in ("long", "integer") else "text"

    def finish(self, run_id: str) -> list[str]:
        """Nothing to do: delta-rs checkpoints as it commits (see the module docstring)."""
        self._table()
        return []

    def read(self, model_version: str | None = None) -> list[dict[str, Any]]:
        filters = None if model_version is None else [("model_version", "=", model_version)]
        with _boundary(f"reading {self.target}"):
            found = self._table().to_pyarrow_table(filters=filters)
        found = found.sort_by([("source_key", "ascending"), ("model_version", "ascending")])
        return arrow_rows(found, self.layout)

    def close(self) -> None:
        self._closed = True
        self._local = threading.local()

    def _options(self) -> dict[str, str] | None:
        return s3_storage_options(self._s3) if self._where.bucket is not None else None

    def _open(self) -> DeltaTable | None:
        try:
            return DeltaTable(self._where.uri, storage_options=self._options())
        except TableNotFoundError:
            return None

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

    def _check_schema(self, table: DeltaTable) -> None:
        problems = schema_differences(_columns(table.schema()), _columns(Schema.from_arrow(self._schema)))
        if problems:
            raise ConfigError(
                f"Delta table {self.target} already exists with a different layout: {'; '.join(problems)}. "
                "It was made for another model or source; choose another --results-table"
            )

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
        if not existing:
            write_deltalake(table, data, mode="append", commit_properties=props)
            return done
        if inserted or updated:
            merger = table.merge(
                data, _MATCH, source_alias="s", target_alias="t", streamed_exec=False, commit_properties=props
            )
            merger.when_matched_update_all(predicate="t.input_fingerprint <> s.input_fingerprint")
            merger.when_not_matched_insert_all().execute()
            table.update_incremental()
        if (table.transaction_version(app) or 0) < version:  # a MERGE that changed nothing commits nothing
            write_deltalake(table, data.slice(0, 0), mode="append", commit_properties=props)
        return done

    def _existing(self, table: DeltaTable, data: pa.Table, model_version: str) -> dict[Any, str]:
        """Stored key → input fingerprint, for the chunk's keys under ``model_version``."""
        if data.num_rows == 0:
            return {}
        keys = data.column("source_key")
        bounds = pc.min_max(keys)
        filters = [
            ("model_version", "=", model_version),
            ("source_key", ">=", bounds["min"].as_py()),
            ("source_key", "<=", bounds["max"].as_py()),
        ]
        found = table.to_pyarrow_table(columns=["source_key", "input_fingerprint"], filters=filters)
        found = found.filter(pc.is_in(found.column("source_key"), value_set=keys.combine_chunks()))
        return dict(zip(found.column(0).to_pylist(), found.column(1).to_pylist(), strict=True))

    def _stored(self, table: DeltaTable, app: str, version: int, fallback: Mapping[str, Any]) -> SinkCommit:
        """The record of the commit that carried (app, version), from the table's history."""
        found = stored_commit(table, app, version)
        if found is None:
            _log.warning(
                "%s: commit info of %s version %d is gone from the log history", self.target, app, version
            )
            return SinkCommit("already", dict(fallback))
        return found
