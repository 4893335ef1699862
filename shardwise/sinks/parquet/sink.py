"""Results as Parquet files with a manifest, in a local directory or on S3.

Under ``<location>/<table>/``:

- ``_shardwise_schema.json``: the table's columns, created once, exclusively, by :meth:`ParquetSink.ensure`;
- ``data/<run_id>-s<shard>-c<chunk>-<token>.parquet``: one file per chunk
  write, ``token`` fresh for each write, written under ``_tmp/<uuid>.<its name>``
  first (the name says whose it is) and made visible by a rename (local ``os.replace``) or an S3 copy
  (then the temporary object is deleted);
- ``_manifest/<run_id>/s<shard>-c<chunk>.json``: the chunk's commit (file
  name, position, counts, rows, ``committed_at``), created *exclusively*:
  locally a fully written temporary file hard-linked to its name
  (``os.link`` fails if the name exists), on S3 ``PutObject`` with
  ``If-None-Match: *`` (S3 answers 412 when the key exists; moto 5.2.5 does).

The manifest entry is the commit: it exists exactly when the chunk landed,
and readers (:meth:`~ParquetSink.read`, :meth:`~ParquetSink.committed_inputs`)
read only the files the manifest lists. Two writers of one chunk (a retry, a
resumed attempt, a stale one that read another snapshot) write two files
under two names, and exactly one creates the entry; the other deletes its
own file, so a loser can never replace the rows the entry counts. A crash
between the rename and the entry leaves a file no entry lists; readers never
see it, and :meth:`~ParquetSink.finish` deletes such files of the run once
every shard is committed, so after a run completes the data files equal the
manifest's. What a killed run leaves (temporary files, unlisted data files)
is deleted by the next run of the table once the ledger says the killed run
is over (:meth:`~ParquetSink.tidy`, :mod:`shardwise.sinks.parquet.leftovers`).

A shard's seal (:meth:`~ParquetSink.seal`) is a manifest entry at the chunk
after its last, ``{"sealed": true}`` with no file, created exclusively like
any entry: a stale attempt's later commit of that chunk finds it and writes
nothing (see :mod:`shardwise.sinks.base`).

**A table grows.** A later run whose outputs include a nullable column the table lacks (``parsed``
from ``--json-schema`` after a run without it) adds it to ``_shardwise_schema.json``, which is what
the table's columns are; files written before hold no such column, and a reader that reads every
file with the table's columns (as :meth:`~ParquetSink.read` does; ``pyarrow.dataset`` given
``schema=`` the files' unified schema; duckdb's ``union_by_name``) sees it null in their rows.
Every table with that file is Shardwise's, so none is refused for it.

Parquet is append-only: every committed row counts as inserted. A key
scored again in a later run (its input changed, or a run without
``--only-new``), or by two runs at once, appears again; readers that want
one row per key take the latest ``scored_at``, as
:meth:`~ParquetSink.committed_inputs` does. (Files cannot be merged in
place; a Delta table keeps one row per key.)

On S3 every call is tried again on the run's retry policy while it fails
transiently; a bucket that does not exist or refuses the credentials is a
:class:`~shardwise.errors.ConfigError` naming it.
"""

from __future__ import annotations

import io
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardwise.errors import ConfigError, SourceError, TransientError
from shardwise.retry_policy import Outage, retry_step
from shardwise.sinks.base import SinkChunk, SinkCommit, last_per_key
from shardwise.sinks.lake import (
    LakeSink,
    arrow_rows,
    layout_refusal,
    refuse_other_format,
    rows_table,
    s3_client,
    schema_differences,
)
from shardwise.sinks.lake_files import Files, LocalFiles, S3Files
from shardwise.sinks.parquet.leftovers import Leftovers, Over, find_leftovers
from shardwise.sources.base import KeyType

__all__ = ["SCHEMA_FILE", "ParquetSink"]

T = TypeVar("T")
SCHEMA_FILE = "_shardwise_schema.json"
"""The table's columns, at its folder's root: the folder marker of the ``parquet`` kind."""
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_log = logging.getLogger(__name__)


def _columns(schema: pa.Schema) -> list[tuple[str, str, bool]]:
    return [(f.name, str(f.type), bool(f.nullable)) for f in schema]


class ParquetSink(LakeSink):
    """Parquet files and a manifest at ``<location>/<table>``; thread-safe (one S3 client, shared).

    ``retry`` is the run's policy: how long a failing S3 call is tried again.
    """

    kind = "parquet"

    def _handles(self) -> None:
        self._lock = threading.Lock()
        self._client: Any = None
        self._files: Files | None = None

    def check(self) -> None:
        self._retried(f"checking {self.target}", self._check)

    def ensure(self) -> None:
        self._retried(f"creating {self.target}", self._ensure)

    def commit(self, chunk: SinkChunk) -> SinkCommit:
        _check_run_id(chunk.run_id)
        what = f"committing chunk {chunk.number} of shard {chunk.shard_id} to {self.target}"
        return self._retried(what, lambda: self._commit(chunk))

    def seal(self, run_id: str, shard_id: int, number: int) -> SinkCommit:
        _check_run_id(run_id)
        entry: dict[str, Any] = {"sealed": True, "file": None, "position": {}, "counts": [0, 0, 0], "rows": 0}
        entry["committed_at"] = datetime.now(timezone.utc).isoformat()
        name = _entry_name(run_id, shard_id, number)

        def seal_once() -> SinkCommit:
            if self._store().create(name, json.dumps(entry).encode()):
                return SinkCommit("sealed", {})
            return self._committed_or_retry(run_id, shard_id, number)

        return self._retried(f"sealing shard {shard_id} at chunk {number} in {self.target}", seal_once)

    def committed(self, run_id: str, shard_id: int, number: int) -> SinkCommit | None:
        _check_run_id(run_id)
        return self._retried(f"reading {self.target}", lambda: self._committed(run_id, shard_id, number))

    def committed_inputs(self, model_version: str) -> Iterator[tuple[str, str]]:
        columns = ["source_key", "input_fingerprint", "model_version", "scored_at"]
        found = self._retried(f"reading {self.target}", lambda: self._committed_table(columns))
        found = found.filter(pc.equal(found.column("model_version"), model_version))
        found = found.sort_by([("scored_at", "ascending")])
        latest = dict(zip(found.column(0).to_pylist(), found.column(1).to_pylist(), strict=True))
        for key, fingerprint in latest.items():
            yield str(key), fingerprint

    def stored_key_type(self) -> KeyType | None:
        stored = self._retried(f"reading {self.target}", lambda: self._store().get(SCHEMA_FILE))
        if stored is None:
            return None
        types = {name: kind for name, kind, *_ in json.loads(stored)["columns"]}
        return "int" if types.get("source_key") == "int64" else "text"

    def finish(self, run_id: str) -> list[str]:
        """Delete the run's data files no manifest entry lists, and its temporary files (left by a killed
        or outraced writer).

        Safe once every shard of the run is sealed: no entry of the run can be created any more.
        """
        _check_run_id(run_id)
        found = self._tidied(lambda run: run == run_id, run_id)
        return found.lines(run_id)

    def tidy(self, over: Over) -> list[str]:
        """Delete what killed writers left (temporary files, data files no entry lists) of the runs
        ``over`` says are over; see :mod:`shardwise.sinks.parquet.leftovers`."""
        found = self._tidied(over, None)
        if found.names:
            _log.info("%s: %s", self.target, "; ".join(found.lines()))
        return found.lines()

    def read(self, model_version: str | None = None) -> list[dict[str, Any]]:
        found = self._retried(f"reading {self.target}", lambda: self._committed_table(None))
        if model_version is not None:
            found = found.filter(pc.equal(found.column("model_version"), model_version))
        order = [("source_key", "ascending"), ("model_version", "ascending"), ("scored_at", "ascending")]
        return arrow_rows(found.sort_by(order), self.layout)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._client is not None:
                self._client.close()
                self._client = None

    def manifest_files(self) -> list[str]:
        """The data files the manifest lists (names under the table), in manifest order."""
        return self._retried(f"reading {self.target}", self._manifest_files)

    def _retried(self, what: str, call: Callable[[], T]) -> T:
        """``call()``, tried again on the run's policy while it fails transiently; a missing or refused
        bucket is a ConfigError naming it."""

        def once() -> T:
            try:
                return call()
            except SourceError as exc:
                refused = self._refusal()
                if refused is not None:
                    raise refused from exc
                raise

        return retry_step(once, what=what, outage=Outage(self._retry))

    def _check(self) -> list[str]:
        stored = self._store().get(SCHEMA_FILE)
        if stored is not None:
            return self._check_schema(stored)
        refuse_other_format(self._where, "parquet", self.target, self._s3)
        return []

    def _ensure(self) -> None:
        refuse_other_format(self._where, "parquet", self.target, self._s3)
        body = json.dumps({"columns": _columns(self._schema)}, indent=1).encode()
        if self._store().create(SCHEMA_FILE, body):
            return
        missing = self._check()
        if missing:  # the table grows: its earlier files read these columns as null (module docstring)
            stored = json.loads(self._store().get(SCHEMA_FILE) or b"{}")["columns"]
            added = [c for c in _columns(self._schema) if c[0] in missing]
            self._store().publish(SCHEMA_FILE, json.dumps({"columns": stored + added}, indent=1).encode())

    def _commit(self, chunk: SinkChunk) -> SinkCommit:
        found = self._committed(chunk.run_id, chunk.shard_id, chunk.number)
        if found is not None:
            return found
        rows = rows_table(last_per_key(chunk.rows), chunk.lineage, self.layout, self._schema)
        stem = f"s{chunk.shard_id:05d}-c{chunk.number:05d}"
        # A name of its own for every write: a racing writer's file can never replace the committed one.
        name = f"data/{chunk.run_id}-{stem}-{uuid.uuid4().hex[:12]}.parquet"
        store, body = self._store(), _parquet_bytes(rows)
        store.publish(name, body)
        entry = {
            "file": name,
            "position": dict(chunk.position),
            "counts": [rows.num_rows, 0, 0],
            "rows": rows.num_rows,
            "committed_at": datetime.now(timezone.utc).isoformat(),
        }
        entry_name = _entry_name(chunk.run_id, chunk.shard_id, chunk.number)
        raw = json.dumps(entry, default=str).encode()
        # Mine when the create lands, or when its first try landed and its answer was lost (the retry then
        # finds this very entry).
        if store.create(entry_name, raw) or _lists(store.get(entry_name), name):
            _still_there(store, name, body, self.target)
            return SinkCommit("written", entry["position"], rows.num_rows)
        store.delete(name)  # another writer committed the chunk (or sealed the shard) first
        return self._committed_or_retry(chunk.run_id, chunk.shard_id, chunk.number)

    def _committed_or_retry(self, run_id: str, shard_id: int, number: int) -> SinkCommit:
        stored = self._committed(run_id, shard_id, number)
        if stored is None:
            raise TransientError(
                f"manifest entry {_entry_name(run_id, shard_id, number)} of {self.target} exists but cannot "
                "be read; retry"
            )
        return stored

    def _committed(self, run_id: str, shard_id: int, number: int) -> SinkCommit | None:
        raw = self._store().get(_entry_name(run_id, shard_id, number))
        if raw is None:
            return None
        entry = json.loads(raw)
        inserted, updated, unchanged = entry["counts"]
        if entry.get("sealed"):
            return SinkCommit("sealed", entry["position"])
        return SinkCommit("already", entry["position"], inserted, updated, unchanged)

    def _manifest_files(self) -> list[str]:
        store = self._store()
        files = []
        for name in store.names("_manifest"):
            raw = store.get(name)
            if raw is not None and name.endswith(".json"):
                listed = json.loads(raw).get("file")
                if listed is not None:  # a seal lists no file
                    files.append(str(listed))
        return files

    def _tidied(self, over: Over, run_id: str | None) -> Leftovers:
        def tidy_once() -> Leftovers:
            store = self._store()
            found = find_leftovers(store, over, now=time.time(), run=run_id)
            for name in found.names:
                store.delete(name)
            return found

        return self._retried(f"tidying {self.target}", tidy_once)

    def _committed_table(self, columns: list[str] | None) -> pa.Table:
        store, tables = self._store(), []
        for name in self._manifest_files():
            raw = store.get(name)
            if raw is None:
                raise ConfigError(f"{self.target}: the manifest lists {name}, which is missing; restore it")
            tables.append(pq.read_table(io.BytesIO(raw), columns=columns, schema=self._schema))
        empty = self._schema.empty_table()
        return pa.concat_tables(tables) if tables else (empty.select(columns) if columns else empty)

    def _store(self) -> Files:
        with self._lock:
            if self._closed:
                raise ConfigError(f"sink {self.target} is closed; make a new one")
            if self._files is None:
                if self._where.bucket is None:
                    self._files = LocalFiles(self._where.uri)
                else:
                    self._client = s3_client(self._s3)
                    bucket, prefix = self._where.bucket, self._where.prefix
                    self._files = S3Files(self._client, bucket, prefix, self.target)
            return self._files

    def _check_schema(self, stored: bytes) -> list[str]:
        """The nullable columns the table lacks, to add; a ConfigError for any other difference. Every
        table with a ``_shardwise_schema.json`` is Shardwise's."""
        found = [tuple(c) for c in json.loads(stored)["columns"]]
        problems, missing = schema_differences(found, _columns(self._schema), ours=True)  # type: ignore[arg-type]
        if problems:
            raise layout_refusal("Parquet", self.target, problems, ours=True)
        return missing


def _lists(raw: bytes | None, name: str) -> bool:
    """Whether a manifest entry (its bytes, None when missing) lists the data file ``name``."""
    return raw is not None and json.loads(raw).get("file") == name


def _still_there(store: Files, name: str, body: bytes, target: str) -> None:
    """Publish ``name`` again if a tidier deleted it before this writer's entry landed.

    Only a writer paused past its leases, between its file and its entry, can
    meet this: a later run judged its run over and tidied the file (see
    :mod:`shardwise.sinks.parquet.leftovers`). The entry lists this very name,
    so the same bytes under it make the chunk whole again.
    """
    if not store.exists(name):
        _log.warning("%s: %s was deleted before its manifest entry landed; writing it again", target, name)
        store.publish(name, body)


def _entry_name(run_id: str, shard_id: int, number: int) -> str:
    return f"_manifest/{run_id}/s{shard_id:05d}-c{number:05d}.json"


def _check_run_id(run_id: str) -> None:
    if not _RUN_ID.match(run_id):
        raise ConfigError(
            f"run id {run_id!r} cannot name a file; use letters, digits, '.', '_' and '-' (a uuid does)"
        )


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return bytes(sink.getvalue().to_pybytes())
