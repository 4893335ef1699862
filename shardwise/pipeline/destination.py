"""Where a run's results and its ledger go: the sink for ``--results``, the ledger for ``--ledger``.

``--results`` is a database URL (a results table, :class:`~shardwise.sinks.sql.sink.SqlSink`)
or a location, a local directory or ``s3://bucket/prefix``, that holds a
Delta table (the default), Parquet files, an Iceberg table or another
installed kind's results at ``LOCATION/RESULTS_TABLE`` (``--results-format``).
Which kind takes them, its checks, its options and its sink are the kind's
own (:mod:`shardwise.sinks.registry`); this module only asks it.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardwise.db.connect import is_database_url
from shardwise.errors import ConfigError
from shardwise.model import OutputColumn
from shardwise.pipeline.spec import Resolver, RunSpec
from shardwise.secrets.by_reference import by_reference
from shardwise.sinks.base import Layout, Sink
from shardwise.sinks.registry import Destination, SinkKind, is_location, options_for, sink_kind_for
from shardwise.sources import Source, SourcePlan

__all__ = [
    "LEDGER_FILE",
    "ResultsPlace",
    "find_ledger",
    "ledger_url",
    "only_new_sink",
    "results_place",
]

LEDGER_FILE = "shardwise_ledger.db"
"""The embedded ledger's file name beside local results."""
_HOME_LEDGER = Path(".shardwise") / "ledger.db"


def _location(results: str) -> str:
    """The location as sinks and the ledger name it: an absolute local path, or the S3 URL, no trailing /."""
    if results.startswith("s3://"):
        return results.rstrip("/")
    return os.path.abspath(os.path.expanduser(results))


@dataclass(frozen=True)
class ResultsPlace:
    """A run's results resolved once: the sink kind that takes them (asked once,
    :func:`~shardwise.sinks.registry.sink_kind_for`), where, and that kind's options; every question
    about the results is a question to it. Make it with :func:`results_place`."""

    spec: RunSpec
    kind: SinkKind
    destination: Destination
    options: Any
    """The kind's typed options, as :func:`~shardwise.sinks.registry.options_for` reads them."""

    def check(self) -> None:
        """The rules that need the resolved URL: the options given are the kind's and fit the destination
        (the kind's own checks)."""
        self.kind.check(self.destination, self.options)

    def target(self) -> str:
        """What the ledger records as the run's results (``RunRecord.results_table``), as the sink kind
        says: the table name for a database, ``KIND:LOCATION/TABLE`` for a location."""
        return self.kind.target(self.destination)

    def recorded(self) -> str:
        """:meth:`target` as the ledger, the summary and the events show it: by its ``env:NAME`` or
        ``secret:NAME`` when the results were given so (:mod:`shardwise.secrets.by_reference`)."""
        return by_reference(self.spec.results_location, self.target())

    def on_this_host(self) -> bool:
        """Whether only this host reaches the results, as their sink kind says (an SQLite file, a local
        directory)."""
        return self.kind.on_this_host(self.destination)

    def same_database(self, source_url: str) -> bool:
        """Whether the results are a table in the database at ``source_url``: the sink kind is asked."""
        return self.kind.same_database(self.destination, source_url)

    def open(self, layout: Layout) -> Sink:
        """The sink, for rows of ``layout``; nothing is created until ``ensure()``. It retries its calls on
        the store on ``spec.run.retry``, the run's one policy, and names its target as :meth:`recorded`
        does, never the location a reference resolved to."""
        sink = self.kind.open(self.destination, layout, self.options, self.spec.run.retry)
        sink.target = by_reference(self.spec.results_location, sink.target)
        return sink

    def layout(self, outputs: tuple[OutputColumn, ...], plan: SourcePlan | None) -> Layout:
        """The rows' layout: the plan's key type, or, where nothing was planned (an only-new run with
        nothing new, a keyed plan of no keys), the one the existing results hold, else text."""
        key = plan.params.get("key_type") if plan is not None else None
        if key in ("int", "text"):
            return Layout(tuple(outputs), key)
        probe = self.open(Layout(tuple(outputs), "text"))
        try:
            stored = probe.stored_key_type()
        finally:
            probe.close()
        return Layout(tuple(outputs), stored or "text")


def results_place(spec: RunSpec, results_url: str) -> ResultsPlace:
    """``spec``'s results at ``results_url`` (``spec.results_location`` resolved), their kind asked once."""
    kind = sink_kind_for(spec.results_location, results_url, spec.results.format)
    location = results_url if kind.schemes else _location(results_url)
    destination = Destination(spec.results_location, location, spec.results.table)
    return ResultsPlace(
        spec, kind, destination, options_for(kind, spec.results.sink_options(), spec.results_location)
    )


def ledger_url(spec: RunSpec, resolve: Resolver, *, create: bool = False) -> str:
    """The ledger's database URL (resolved), by the rule of the module docstring; ``create`` makes the
    embedded default's folder (a run does; a dry run and a check create nothing)."""
    return find_ledger(spec.ledger, spec.results_location, spec.source.location, resolve, create=create)


def find_ledger(
    ledger: str | None, results: str | None, source: str | None, resolve: Resolver, *, create: bool = False
) -> str:
    """:func:`ledger_url` from the connections themselves (``shardwise runs`` has no run spec)."""
    if ledger:
        url = resolve(ledger)
        if not is_database_url(url):
            raise ConfigError(
                f"ledger {ledger!r} is not a database URL; give postgresql+psycopg://... or "
                "sqlite:///path/to/ledger.db"
            )
        return url
    results_url = resolve(results) if results else None
    if results_url is not None and is_database_url(results_url):
        return results_url
    source_url = resolve(source) if source else None
    if source_url is not None and is_database_url(source_url):
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


def only_new_sink(
    place: ResultsPlace, source_url: str, source: Source, outputs: tuple[OutputColumn, ...]
) -> Sink | None:
    """The sink only-new asks what it holds (see :mod:`shardwise.pipeline.source_plan`); None when the
    results table is in the SQL source's own database (``source_url``), which anti-joins it in SQL.
    The caller closes it."""
    if place.same_database(source_url) and source.fingerprints_in_database:
        return None
    return place.open(place.layout(outputs, None))
