"""A SQL table as a Shardwise source: key-range shards, one snapshot, streamed reads.

:class:`SqlSource` reads any SQLAlchemy URL: PostgreSQL through psycopg 3
(``postgresql+psycopg://``), or SQLite, the embedded default. The table, key
and text column are checked against the reflected schema and quoted by
SQLAlchemy (see :mod:`shardwise.sources.sql.schema`); shards are key ranges
``lo <= key < hi`` computed in the database (see
:mod:`shardwise.sources.sql.plan`).

What a run sees, and its limits:

* **PostgreSQL: one snapshot.** :meth:`SqlSource.plan` exports the snapshot
  of its ``REPEATABLE READ READ ONLY`` transaction and keeps that transaction
  open until :meth:`SqlSource.close`; every read imports it, so all shards see
  the table as it was planned, whatever commits meanwhile. Once the planning
  transaction has ended (a resumed run in a new process, a closed source) the
  snapshot cannot be imported: a read then uses a fresh ``REPEATABLE READ``
  snapshot and says so in :class:`ShardReader` (``snapshot_lost``, and the
  snapshot it did read) and in a logged warning, or refuses with
  ``on_lost_snapshot="error"``. The open transaction holds back VACUUM's
  horizon, so close the source when the run's reads are done.
* **SQLite: no shared snapshot.** A snapshot cannot outlive the connection
  that holds it once a writer commits, so each shard is read by one statement
  at its own point in time, and the plan's ``snapshot`` is None.
* **Rows with a NULL key are not planned or read** (``key IS NOT NULL``): they
  cannot be addressed, so they cannot be dead letters either (a redrive reads
  by key). The plan counts them in ``params["null_keys"]``, and a run warns
  of them and counts them as skipped in its summary, as for a Parquet source
  (see :mod:`shardwise.pipeline.skipped`); ``--where "key IS NOT NULL"``
  leaves them out on purpose. NULL or non-text *values* are read as they
  are: the engine dead-letters them.
* **Only new rows** (:class:`~shardwise.sources.base.NewOnly`): a ``NOT
  EXISTS`` anti-join on the results table, in the database, both when planning
  and when reading. A row is new when it has no result for the model version
  with the fingerprint of its current text. A NULL text has no fingerprint, so
  it is always new: it is dead-lettered again on every only-new run. The
  results table is ``results_table`` in the database's default schema, where
  the results store creates it, whichever schema the source table is in (or
  ``schema.table``); while it does not exist every row is new.
  ``params["skipped_rows"]`` counts the rows skipped. A binary (``bytea``,
  BLOB) text column is scored as the UTF-8 text it holds and fingerprinted
  over its bytes on both sides, so unchanged rows are skipped too (see
  :mod:`shardwise.sources.sql.fingerprint`); :meth:`SqlSource.value_kind`
  samples it, so that a text model is refused a column of pictures before a
  run (see :mod:`shardwise.sources.binary`).
* **An image column** (``image_column``): every row's value is an
  :class:`~shardwise.model.binary_value.BinaryValue`, its bytes stored inline or
  fetched through the reference the column holds (see
  :mod:`shardwise.sources.images`). Only-new anti-joins a binary image column
  in SQL as above (``md5(bytea)`` is the MD5 of the image). A reference's
  fingerprint is the MD5 of the *fetched* bytes, which SQL cannot see, so
  for an image column that is not binary-typed
  (:attr:`SqlSource.fingerprints_in_database` is False) this source refuses
  ``new_only``: the pipeline compares in Python instead, reading every
  row's image (:mod:`shardwise.pipeline.source_plan`).
* **A schema-qualified table** (``table="app.docs"``, or ``schema="app"``):
  PostgreSQL only; the name is split by its grammar, not at any dot
  (``app."my.docs"``), and both parts are checked against the reflected
  schema (see :mod:`shardwise.sources.sql.names`). A SQLite source refuses one.
* **The key must be unique** among the filtered rows: planning, and
  :meth:`SqlSource.check`, refuse a table whose key repeats, naming up to five
  repeated keys (see :mod:`shardwise.sources.sql.unique`); a declared primary
  key or unique index makes the check free.
* **Keyed reads** (:meth:`SqlSource.read_keys`, for a redrive of dead
  letters) read the current table, not a plan's snapshot: ``key IN (...)`` in
  chunks, with the same filter (see :mod:`shardwise.sources.sql.keys`).
* **The ``where`` filter is one checked expression.** It is parsed with a SQL
  parser when the source opens, limited to row-level syntax and an allow-list
  of functions, and only its re-rendered form reaches the database, in
  parentheses, AND-ed apart from the key range (see
  :mod:`shardwise.sources.sql.where`). It still runs with the source role's
  rights, so on PostgreSQL every query runs in a read-only transaction and
  SQLite connections are ``query_only``: a filter cannot write.
* **No query runs longer than ``query_timeout_s``** (default 300 s; 0: no
  limit): PostgreSQL's ``statement_timeout`` per transaction, an interrupt on
  SQLite; a query it stops fails the planning or the shard with a
  :class:`~shardwise.errors.SourceError` naming the limit (see
  :mod:`shardwise.sources.sql.timeout`). The plan records it.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import islice
from typing import TYPE_CHECKING, Any, Literal

import sqlalchemy as sa

from shardwise.errors import ConfigError, SourceError
from shardwise.model.text import row_value
from shardwise.retry_policy import RetryPolicy
from shardwise.sources.base import (
    Key,
    NewOnly,
    ReadFrom,
    Shard,
    ShardReader,
    Source,
    SourcePlan,
    SourceRow,
    SourceValues,
)
from shardwise.sources.binary import PREFIX_BYTES, SAMPLE_ROWS, binary_values
from shardwise.sources.images import ImageAccess, image_column_of
from shardwise.sources.keys import parse_keys
from shardwise.sources.sizing import Sizing
from shardwise.sources.sql.check import check_plan, new_only_params
from shardwise.sources.sql.db import Database
from shardwise.sources.sql.fingerprint import register_sqlite_fingerprint
from shardwise.sources.sql.keys import begin_keyed_read, keyed_rows
from shardwise.sources.sql.plan import plan_shards
from shardwise.sources.sql.query import Selection, filter_probe, read_query, sample_query
from shardwise.sources.sql.schema import reflect_results, reflect_source
from shardwise.sources.sql.snapshot import begin_planned_read, export_snapshot, idle_limit_s, read_only
from shardwise.sources.sql.timeout import DEFAULT_QUERY_TIMEOUT_S
from shardwise.sources.sql.unique import check_unique_key

if TYPE_CHECKING:
    from shardwise.sources.sql.where import SqlFilter

__all__ = ["SqlSource"]


class SqlSource(Source):
    """A table in a SQL database, planned into key ranges and read shard by shard.

    Connects once on construction to check the table and columns. Safe to share
    between threads: reads take their own connection from one engine's pool.
    """

    kind = "sql"

    def __init__(
        self,
        url: str,
        table: str,
        key: str,
        text_column: str = "text",
        where: str | None = None,
        schema: str | None = None,
        *,
        input_columns: Mapping[str, str] | None = None,
        image_column: str | None = None,
        image_access: ImageAccess | None = None,
        s3_client: Any | None = None,
        retry: RetryPolicy | None = None,
        on_lost_snapshot: Literal["fresh", "error"] = "fresh",
        fetch_rows: int = 1000,
        query_timeout_s: float = DEFAULT_QUERY_TIMEOUT_S,
    ) -> None:
        if where is not None and not where.strip():
            raise ConfigError("where must be a SQL boolean expression or None; got an empty string")
        if on_lost_snapshot not in ("fresh", "error"):
            raise ConfigError(f"on_lost_snapshot must be 'fresh' or 'error'; got {on_lost_snapshot!r}")
        if fetch_rows < 1:
            raise ConfigError(f"fetch_rows must be a positive integer; got {fetch_rows!r}")
        self._images = image_column_of(
            image_column, text_column, input_columns, s3_client, retry, image_access
        )
        self._db = Database(url, query_timeout_s)
        if self._db.dialect == "sqlite":
            register_sqlite_fingerprint(self._db.engine)
        try:
            self._filter = None if where is None else _parsed(where, self._db.dialect)
            with self._db.errors(f"checking table {table!r}"), self._db.engine.connect() as conn:
                value_column, role = (
                    (text_column, "text") if image_column is None else (image_column, "image")
                )
                self._src = reflect_source(conn, table, key, value_column, schema, input_columns, role)
        except BaseException:
            self._db.dispose()
            raise
        self.identity = self._db.identity(self._src.schema, self._src.table.name)
        self._where, self._on_lost, self._fetch_rows = where, on_lost_snapshot, fetch_rows
        self._held: dict[str, sa.Connection] = {}
        self.fingerprints_in_database = image_column is None or isinstance(
            self._src.text.type, sa.LargeBinary
        )
        self._lock = threading.Lock()

    @property
    def params(self) -> dict[str, Any]:
        """What this source reads; a plan records it and a read checks the plan against it."""
        src = self._src
        return {
            "table": src.table.name,
            "schema": src.schema,
            "key": src.key.name,
            "key_type": src.key_kind,
            "text_column": src.text.name,
            "image_column": None if self._images is None else src.text.name,
            "input_columns": [c.name for c in src.more],
            "where": self._where,
            "query_timeout_s": self._db.limit.seconds,
        }

    def plan_sized(self, sizing: Sizing, new_only: NewOnly | None) -> SourcePlan:
        """Cut the table into key ranges: exactly ``shards``, or about ``rows_per_shard`` rows each.

        On PostgreSQL the planning transaction stays open, holding the snapshot
        the reads import, until :meth:`close`.
        """
        if new_only is not None and not self.fingerprints_in_database:
            raise ConfigError(
                f"image column {self._src.text.name!r} holds references, whose fingerprint is the MD5 of "
                "the fetched bytes, which SQL cannot compute; plan only-new through the pipeline "
                "(shardwise.pipeline.source_plan), which compares in Python, or plan without new_only"
            )
        conn, held = self._db.engine.connect(), False
        try:
            with self._db.errors(f"planning {self.identity}"):
                snapshot = self._begin_plan(conn)
                idle_limit = idle_limit_s(conn) if snapshot is not None else None
                sel = self._selection(conn, new_only)
                check_unique_key(conn, sel, self.identity)
                counts, cut = plan_shards(conn, sel, sizing)
            if snapshot is not None:
                with self._lock:
                    self._held[snapshot] = conn
                held = True
        finally:
            if not held:
                conn.close()
        params = {
            **self.params,
            **sizing.params(counts.rows),
            "new_only": new_only_params(new_only, sel.results is not None),
            "rows": counts.rows,
            "distinct_keys": counts.distinct_keys,
            "null_keys": counts.null_keys,
            "skipped_rows": counts.skipped_rows,
            "expected_rows_exact": counts.sizes_exact(self._db.dialect),
            "snapshot_idle_limit_s": idle_limit,
        }
        return SourcePlan("sql", self.identity, snapshot, cut, params)

    def check(self) -> None:
        """Fail now on what planning would refuse: a filter that does not run, or a key that repeats.

        The table, key and text column, and the filter's syntax, were checked
        when the source opened. Here the database plans the filter on no rows,
        so a wrong column or type fails, and the key's uniqueness is checked as
        planning checks it: free for a declared unique key, else one grouped
        read of the key column (:mod:`shardwise.sources.sql.unique`). Both run
        in one read-only transaction.
        """
        with self._db.errors(f"checking {self.identity}"), self._db.engine.connect() as conn:
            begin_keyed_read(conn)
            self._db.limit.begin(conn)
            sel = Selection(self._src, self._db.dialect, self._filter)
            if self._filter is not None:
                self._probe_filter(conn, sel)
            check_unique_key(conn, sel, self.identity)

    def value_kind(self) -> SourceValues:
        """Pictures for an image column; text for a text column, unless it is binary-typed (``bytea``,
        ``BLOB``, or of no declared type on SQLite) and a sample of its values holds no text at all
        (see :mod:`shardwise.sources.binary`): one query, of 16 values' first 64 bytes."""
        column = self._src.text
        role = "text" if self._images is None else "image"
        what = f"{role} column {column.name!r} of {self.identity}"
        if self._images is not None:
            return SourceValues("image", what, column.name)
        if not isinstance(column.type, sa.LargeBinary | sa.types.NullType):
            return SourceValues("text", what, column.name)
        with self._db.errors(f"sampling {what}"), self._db.engine.connect() as conn:
            begin_keyed_read(conn)
            self._db.limit.begin(conn)
            query = sample_query(
                Selection(self._src, self._db.dialect, self._filter), SAMPLE_ROWS, PREFIX_BYTES
            )
            sample = [v if isinstance(v, str) else bytes(v) for v in conn.execute(query).scalars()]
        untyped = isinstance(column.type, sa.types.NullType)
        typed = (
            "column of no declared type"
            if untyped
            else f"{column.type.compile(self._db.engine.dialect)} column"
        )
        return binary_values(what, column.name, typed, sample)

    def _probe_filter(self, conn: sa.Connection, sel: Selection) -> None:
        try:
            with self._db.errors("checking the filter"):
                conn.execute(filter_probe(sel))
        except SourceError as exc:
            detail = str(exc).removeprefix("checking the filter failed: ").splitlines()[0]
            columns = ", ".join(c.name for c in self._src.table.columns)
            raise ConfigError(
                f"where filter {self._where!r} does not run on {self.identity}: {detail}; fix --where "
                f"(columns are: {columns})"
            ) from exc

    @contextmanager
    def open_reader(
        self, plan: SourcePlan, shard: Shard, start: ReadFrom = ReadFrom()
    ) -> Iterator[ShardReader]:
        """Read one shard and learn which snapshot it was read at (for lineage).

        A ``start`` with a key reads only the keys above it: a shard resumed
        after its committed chunks, at the plan's snapshot when it is still
        held. Without a key, its first ``start.rows`` rows are read and dropped.
        """
        after = start.key if start.rows else None
        new_only = check_plan(plan, shard, self.identity, self.params, self._src.key_kind)
        doing = f"reading shard {shard.shard_id} of {self.identity}"
        with self._db.errors(doing), self._db.engine.connect() as conn:
            snapshot, lost = self._begin_read(conn, plan, shard)
            bounds = shard.bounds
            query = read_query(self._selection(conn, new_only), bounds["lo"], bounds["hi"], after)
            streamed = conn.execution_options(stream_results=True, yield_per=self._fetch_rows)
            result = streamed.execute(query)
            try:
                rows = self._rows(self._db.limit.rows(conn, result), doing)
                if start.rows and after is None:
                    rows = islice(rows, start.rows, None)
                values = self._values(rows)
                try:
                    yield ShardReader(shard, snapshot, lost, values)
                finally:
                    values.close()
            finally:
                result.close()

    def read_keys(self, keys: Sequence[Key]) -> Generator[SourceRow, None, None]:
        """Stream the current rows whose key is in ``keys``, ordered by key; absent keys are not yielded.

        Keys may come as text (the ledger stores them so): each is converted to
        the key column's type, and one that cannot be is a :class:`ConfigError`.
        """
        wanted = sorted(parse_keys(keys, self._src.key_kind, self.identity))
        doing = f"reading {len(wanted)} keys of {self.identity}"
        with self._db.errors(doing), self._db.engine.connect() as conn:
            begin_keyed_read(conn)
            self._db.limit.begin(conn)
            rows = keyed_rows(conn, self._selection(conn, None), wanted)
            yield from self._values(self._db.limit.rows(conn, rows))

    def close(self) -> None:
        """End the planning transactions (releasing their snapshots) and close pooled connections."""
        with self._lock:
            held, self._held = list(self._held.values()), {}
        with self._db.errors(f"closing {self.identity}"):
            for conn in held:
                conn.close()
            self._db.dispose()
        if self._images is not None:
            self._images.close()

    def _begin_plan(self, conn: sa.Connection) -> str | None:
        if self._db.is_postgres:
            read_only(conn).begin()
            snapshot = export_snapshot(conn)
            self._db.limit.begin(conn)
            return snapshot
        if self._db.dialect == "sqlite":
            # pysqlite opens no transaction for SELECTs; BEGIN keeps both planning queries in one read.
            conn.exec_driver_sql("BEGIN")
        return None

    def _begin_read(self, conn: sa.Connection, plan: SourcePlan, shard: Shard) -> tuple[str | None, bool]:
        if not self._db.is_postgres:
            return None, False  # one statement reads the shard: consistent on its own
        begun = begin_planned_read(conn, plan.snapshot, self._on_lost, shard.shard_id, self.identity)
        self._db.limit.begin(conn)  # after SET TRANSACTION SNAPSHOT, which must come first
        return begun

    def _selection(self, conn: sa.Connection, new_only: NewOnly | None) -> Selection:
        if new_only is None:
            return Selection(self._src, self._db.dialect, self._filter)
        results = reflect_results(conn, new_only.results_table)
        return Selection(self._src, self._db.dialect, self._filter, results, new_only.model_version)

    def _values(self, rows: Iterator[SourceRow]) -> Generator[SourceRow, None, None]:
        """``rows`` as they are, or with ``BinaryValue`` values when this source reads an image column."""
        if self._images is None:
            yield from rows
        else:
            yield from self._images.rows(rows)

    def _rows(self, result: Iterable[Any], doing: str) -> Iterator[SourceRow]:
        names = self._src.input_names
        with self._db.errors(doing):
            for key, *values in result:
                yield SourceRow(key, row_value(values, names))


def _parsed(where: str, dialect: str) -> SqlFilter:
    """The operator's filter, checked; its parser (sqlglot, 0.15 s to import) loads only for a filter."""
    from shardwise.sources.sql.where import parse_filter

    return parse_filter(where, dialect)
