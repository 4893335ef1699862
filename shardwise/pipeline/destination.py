"""Where a run's results and its ledger go: the sink for ``--results``, the ledger for ``--ledger``.

``--results`` is a database URL (a results table, :class:`~shardwise.sinks.sql.SqlSink`)
or a location, a local directory or ``s3://bucket/prefix``, that holds a
Delta table (the default) or Parquet files at ``LOCATION/RESULTS_TABLE``
(``--results-format``).

The ledger (runs, shards, chunk marks, dead letters) is its own store. Unless
``--ledger`` names one, it is, in this order: the results database when the
results go to one; the source database when the source is one; an embedded
SQLite file, ``LOCATION/shardwise_ledger.db`` beside local results, or
``~/.shardwise/ledger.db`` for results on S3. Every worker must reach the
same ledger: for workers on other machines, give ``--ledger`` a database URL
they all reach.
"""

from __future__ import annotations

import os
from pathlib import Path

from shardwise.by_reference import by_reference, is_reference
from shardwise.errors import ConfigError
from shardwise.model import OutputColumn
from shardwise.pipeline.spec import Resolver, RunSpec
from shardwise.sinks.base import Layout, Sink
from shardwise.sources import Source, SourcePlan, is_sql_url

__all__ = [
    "LEDGER_FILE",
    "check_destination",
    "find_ledger",
    "in_source_database",
    "is_location",
    "ledger_url",
    "only_new_sink",
    "open_sink",
    "results_target",
    "sink_layout",
]

LEDGER_FILE = "shardwise_ledger.db"
"""The embedded ledger's file name beside local results."""
_HOME_LEDGER = Path(".shardwise") / "ledger.db"


def is_location(results: str) -> bool:
    """A local directory or an ``s3://`` prefix (not a database URL)."""
    return results.startswith("s3://") or ("://" not in results and bool(results))


def _location(results: str) -> str:
    """The location as sinks and the ledger name it: an absolute local path, or the S3 URL, no trailing /."""
    if results.startswith("s3://"):
        return results.rstrip("/")
    return os.path.abspath(os.path.expanduser(results))


def results_target(spec: RunSpec, results_url: str) -> str:
    """What the ledger records as the run's results (``RunRecord.results_table``): the table name for a
    database, ``FORMAT:LOCATION/TABLE`` for a location."""
    if is_sql_url(results_url):
        return spec.results_table
    return f"{spec.results_format or 'delta'}:{_location(results_url)}/{spec.results_table}"


def check_destination(spec: RunSpec, results_url: str) -> None:
    """The rules that need the resolved URL: what ``--results`` may be, and which options fit it."""
    if not (is_sql_url(results_url) or is_location(results_url)):
        raise ConfigError(
            f"results {spec.results!r} is neither a database URL (postgresql+psycopg://..., sqlite:///...) "
            "nor a location (a local directory or s3://bucket/prefix); give one of those"
        )
    if is_sql_url(results_url):
        if spec.results_format is not None:
            raise ConfigError(
                f"results_format {spec.results_format!r} applies to results in a location (a directory or "
                f"s3://...), and {spec.results!r} is a database; drop --results-format"
            )
        return
    if not results_url.startswith("s3://"):
        _check_local_location(spec, _location(results_url))
    vector_options = {
        "embedding_type": spec.embedding_type not in ("auto", "array"),
        "index": spec.index != "none",
    }
    for name, given in vector_options.items():
        if given:
            raise ConfigError(
                f"{name} {getattr(spec, name)!r} applies to results in PostgreSQL (pgvector), and results "
                f"go to {spec.results!r}; drop --{name.replace('_', '-')}, or give a database URL"
            )


def _check_local_location(spec: RunSpec, location: str) -> None:
    """Local results go in a directory: ``LOCATION/TABLE`` and the default ledger beside it are made
    under ``location``, so it, and each of its parents that exists, must be a directory (writing under a
    regular file fails the same way on every try: no retry can mend it)."""
    for path in (Path(location) / spec.results_table, *Path(location, spec.results_table).parents):
        if not os.path.lexists(path):
            continue
        if os.path.isdir(path):
            return  # the nearest existing folder: what is under it is made as the run needs it
        # A location given as env:NAME is named so, never by its value (shardwise.by_reference).
        shown = repr(spec.results) if is_reference(spec.results) else f"{spec.results!r}: {str(path)!r}"
        raise ConfigError(
            f"results {shown} is not a directory (a regular file, or a link to none), so results cannot "
            "be written under it; give --results a directory, or a path whose existing part is a directory"
        )


def ledger_url(spec: RunSpec, resolve: Resolver, *, create: bool = False) -> str:
    """The ledger's database URL (resolved), by the rule of the module docstring; ``create`` makes the
    embedded default's folder (a run does; a dry run and a check create nothing)."""
    return find_ledger(spec.ledger, spec.results, spec.source, resolve, create=create)


def find_ledger(
    ledger: str | None, results: str | None, source: str | None, resolve: Resolver, *, create: bool = False
) -> str:
    """:func:`ledger_url` from the connections themselves (``shardwise runs`` has no run spec)."""
    if ledger:
        url = resolve(ledger)
        if not is_sql_url(url):
            raise ConfigError(
                f"ledger {ledger!r} is not a database URL; give postgresql+psycopg://... or "
                "sqlite:///path/to/ledger.db"
            )
        return url
    results_url = resolve(results) if results else None
    if results_url is not None and is_sql_url(results_url):
        return results_url
    source_url = resolve(source) if source else None
    if source_url is not None and is_sql_url(source_url):
        return source_url
    if results_url is None or not is_location(results_url):
        raise ConfigError(
            "the ledger is found from --ledger, or --results (a database, or a location with the default "
            "ledger); give --ledger URL or --results"
        )
    location = _location(results_url)
    path = Path.home() / _HOME_LEDGER if location.startswith("s3://") else Path(location) / LEDGER_FILE
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def open_sink(spec: RunSpec, results_url: str, layout: Layout) -> Sink:
    """The sink ``spec`` writes to, for rows of ``layout``; nothing is created until ``ensure()``. A lake
    sink retries its calls on the store on ``spec.retry``, the run's one policy."""
    if is_sql_url(results_url):
        from shardwise.sinks.sql import SqlSink

        return SqlSink(
            results_url,
            spec.results_table,
            layout,
            embedding=spec.embedding_type,
            index=spec.index,
            metric=spec.index_metric,
            timeout_s=spec.retry.db_timeout_s,
        )
    location = _location(results_url)
    if (spec.results_format or "delta") == "delta":
        try:
            from shardwise.sinks.delta import DeltaSink
        except ImportError as exc:
            raise ConfigError(
                f"results in Delta Lake need the deltalake package ({exc}); pip install 'shardwise[delta]', "
                "or give --results-format parquet"
            ) from exc
        sink: Sink = DeltaSink(location, spec.results_table, layout, retry=spec.retry)
        return _named(spec, sink)
    from shardwise.sinks.parquet_files import ParquetSink

    files: Sink = ParquetSink(location, spec.results_table, layout, retry=spec.retry)
    return _named(spec, files)


def _named(spec: RunSpec, sink: Sink) -> Sink:
    """A lake sink whose location was given as ``env:NAME`` or ``secret:NAME`` targets it by that name
    (:mod:`shardwise.by_reference`): the ledger records its target so, and the summary, the artifacts,
    the events and the sink's own messages show it so, never the location it resolved to."""
    sink.target = by_reference(spec.results, sink.target)
    return sink


def sink_layout(
    spec: RunSpec, results_url: str, outputs: tuple[OutputColumn, ...], plan: SourcePlan | None
) -> Layout:
    """The rows' layout: the plan's key type, or, where nothing was planned (an only-new run with
    nothing new, a keyed plan of no keys), the one the existing results hold, else text."""
    key = plan.params.get("key_type") if plan is not None else None
    if key in ("int", "text"):
        return Layout(tuple(outputs), key)
    probe = open_sink(spec, results_url, Layout(tuple(outputs), "text"))
    try:
        stored = probe.stored_key_type()
    finally:
        probe.close()
    return Layout(tuple(outputs), stored or "text")


def in_source_database(spec: RunSpec, resolve: Resolver) -> bool:
    """Whether the results are a table in the SQL source's own database (only-new then anti-joins it)."""
    source, results = resolve(spec.source), resolve(spec.results)
    return is_sql_url(source) and is_sql_url(results) and _db_of(source) == _db_of(results)


def _db_of(url: str) -> str:
    """A URL without its credentials and query, to compare which database two URLs name."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    return f"{parsed.get_backend_name()}://{parsed.host or ''}:{parsed.port or ''}/{parsed.database or ''}"


def only_new_sink(
    spec: RunSpec, resolve: Resolver, source: Source, outputs: tuple[OutputColumn, ...]
) -> Sink | None:
    """The sink only-new asks what it holds (see :mod:`shardwise.pipeline.source_plan`); None when the
    results table is in the SQL source's own database, which anti-joins it in SQL. The caller closes it."""
    if in_source_database(spec, resolve) and source.fingerprints_in_database:
        return None
    results_url = resolve(spec.results)
    return open_sink(spec, results_url, sink_layout(spec, results_url, outputs, None))
