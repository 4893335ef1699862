"""Sink kinds: where results can go, each registered by name in the entry-point group ``shardwise.sinks``.

A sink kind is an object (:class:`SinkKind`) that knows one kind of
destination: which ``--results`` it takes (database URLs of its schemes, or
a location: a local directory or ``s3://bucket/prefix``), the options it
owns (a :class:`SinkOptions` model: each field is a ``--flag`` of ``run``,
``plan`` and ``redrive`` and a field of the flow's ``results.options``
section, under the kind's name), the checks that need nothing but those,
and how to open its :class:`~shardwise.sinks.base.Sink`.

The built-in kinds (``sql``, ``delta``, ``parquet``, ``iceberg``) register
exactly as a third party's would, in ``pyproject.toml``::

    [project.entry-points."shardwise.sinks"]
    jsonl = "my_package.jsonl_sink:KIND"

The entry point names the kind *object*; its module must import without
the kind's own packages (a kind whose extra is missing is still listed, and
refused when chosen, naming ``pip install 'shardwise[EXTRA]'``). Listing
the kinds imports those light modules once per process.

How a run's kind is chosen (:func:`sink_kind_for`): ``--results-format NAME``
names it; without it, a database URL goes to the kind claiming its scheme,
and a location to :data:`DEFAULT_LOCATION_KIND`. Option names are unique
across kinds (one ``--flag`` each), so an option given for another kind than
the chosen one is refused by name, before anything runs.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel

from shardwise.db.connect import database_scheme
from shardwise.entry_points import KindRegistry
from shardwise.errors import ConfigError
from shardwise.kind_options import KindFamily, KindOptions, KindSections

if TYPE_CHECKING:
    from shardwise.model import OutputColumn
    from shardwise.retry_policy import RetryPolicy
    from shardwise.sinks.base import Layout, Sink

__all__ = [
    "DEFAULT_LOCATION_KIND",
    "ENTRY_POINT_GROUP",
    "Destination",
    "SinkKind",
    "SinkOptions",
    "clear_cache",
    "is_location",
    "options_for",
    "results_options_model",
    "sink_kind",
    "sink_kind_for",
    "sink_kind_names",
    "sink_kinds",
    "sink_option_flags",
    "sink_sections",
]

ENTRY_POINT_GROUP = "shardwise.sinks"
DEFAULT_LOCATION_KIND = "delta"
"""The kind of results in a location when ``--results-format`` is not given."""


class SinkOptions(KindOptions):
    """The options one sink kind owns; a kind's options class subclasses it (see
    :class:`~shardwise.kind_options.KindOptions`). Two kinds may declare the same option: each
    then has its own flag, ``--KIND-OPTION`` (:func:`~shardwise.kind_options.option_flags`)."""


@dataclass(frozen=True)
class Destination:
    """Where one run's results go, as a sink kind is given it."""

    given: str
    """``--results`` as the user gave it (perhaps ``env:NAME``): what messages show, never ``location``."""
    location: str
    """``given`` resolved: a database URL, an absolute local path, or ``s3://bucket/prefix`` (no
    trailing ``/``)."""
    table: str
    """``--results-table``: a table name, or the table's folder name in a location."""


@runtime_checkable
class SinkKind(Protocol):
    """One kind of destination, registered by :attr:`name` (what ``--results-format`` says)."""

    name: str
    label: str
    """What its results are, for messages: ``"a database table (PostgreSQL, pgvector, SQLite)"``."""
    extra: str | None
    """The ``shardwise[EXTRA]`` that brings its packages, or None when it needs none beyond the core."""
    schemes: tuple[str, ...]
    """The database URL schemes it is chosen for (``postgresql``, ``sqlite``; the part before ``+``);
    ``()`` for a kind whose results go to a location."""
    options: type[SinkOptions]

    def require(self) -> None:
        """Refuse, naming ``pip install 'shardwise[EXTRA]'``, when a package it needs is missing."""

    def target(self, dest: Destination) -> str:
        """What the ledger records as the run's results (``RunRecord.results_table``); never a secret."""

    def check(self, dest: Destination, options: SinkOptions) -> None:
        """The refusals that need only the destination and options; reads and creates nothing."""

    def check_outputs(self, options: SinkOptions, model: str, outputs: tuple[OutputColumn, ...]) -> None:
        """Refuse options that would do nothing for these model outputs (vector options, no vectors)."""

    def same_database(self, dest: Destination, url: str) -> bool:
        """Whether the results are a table in the database ``url`` names (only-new anti-joins there)."""

    def on_this_host(self, dest: Destination) -> bool:
        """Whether only this host reaches the results (an SQLite file, a local directory): workers on
        other hosts could not write them."""

    def folder_marker(self) -> str | None:
        """What its table leaves at the root of its folder ``LOCATION/TABLE`` (``_delta_log/``), by which
        another kind sees the folder is taken (one folder holds one format); None for a kind whose
        results are no folder of its own (a database table, a catalog's warehouse)."""

    def open(self, dest: Destination, layout: Layout, options: SinkOptions, retry: RetryPolicy) -> Sink:
        """The sink for rows of ``layout``; nothing is created until its ``ensure()``."""


def sink_kinds() -> dict[str, SinkKind]:
    """The installed kinds that load, by name, built-in ones first. A kind that cannot be loaded is
    left out; it is
    refused when chosen (:func:`sink_kind`), so one broken package breaks no other command."""
    return {kind.name: kind for kind in _KINDS.usable()}


def sink_kind_names() -> list[str]:
    """Every registered kind's name, sorted, those that cannot be loaded included: ``--results-format``
    takes each, and one that cannot be loaded is then refused saying why."""
    return sorted(_KINDS.loaded())


def _not_a_kind(name: str, found: Any) -> str | None:
    if isinstance(found, SinkKind) and found.name == name:
        return None
    return f"is not a SinkKind named {name!r}; see docs/how-to/extending.md"


_KINDS: KindRegistry[SinkKind] = KindRegistry(
    ENTRY_POINT_GROUP,
    "sink kind",
    _not_a_kind,
    "results format {name!r} is not an installed sink kind; known: {known} (another comes from a package "
    f"that registers it under the entry-point group {ENTRY_POINT_GROUP!r}; see docs/how-to/extending.md)",
)


@functools.cache
def results_options_model() -> type[BaseModel]:
    """The options of every installed kind that has any, one section each under the kind's name: the
    flow's ``results.options`` parameter, which the Prefect form shows as a section per kind."""
    doc = "Options of the sink kinds, a section each; only the section of the results' kind applies."
    return _OPTIONS.sections_model("ResultsOptions", doc)


def clear_cache() -> None:
    """Forget the loaded kinds, so that packages installed since are seen (tests, a long-lived process)."""
    _KINDS.clear()
    results_options_model.cache_clear()


def sink_kind(name: str) -> SinkKind:
    """The kind registered as ``name``; an unknown one is refused naming those installed."""
    return _KINDS.kind(name)


def is_location(results: str) -> bool:
    """A local directory or an ``s3://`` prefix (not a database URL)."""
    return results.startswith("s3://") or ("://" not in results and bool(results))


def sink_kind_for(results: str, results_url: str, results_format: str | None) -> SinkKind:
    """The kind a run's results go to: ``results_format``'s, else the one claiming the database URL's
    scheme, else :data:`DEFAULT_LOCATION_KIND` for a location. ``results`` is as given, for messages."""
    scheme = database_scheme(results_url)
    if results_format is not None:
        kind = sink_kind(results_format)
        if scheme is not None and scheme not in kind.schemes:
            raise ConfigError(
                f"results_format {results_format!r} applies to results in {kind.label}, and {results!r} is "
                "a database; drop --results-format"
            )
        if scheme is None and kind.schemes:
            raise ConfigError(
                f"results_format {results_format!r} takes a database URL ({', '.join(kind.schemes)}), and "
                f"{results!r} is a location; give --results a database URL, or drop --results-format"
            )
        kind.require()
        return kind
    if scheme is not None:
        for kind in sink_kinds().values():
            if scheme in kind.schemes:
                kind.require()
                return kind
        schemes = sorted({s for kind in sink_kinds().values() for s in kind.schemes})
        raise ConfigError(
            f"results {results!r} is neither a database URL ({', '.join(f'{s}://...' for s in schemes)}) "
            "nor a location (a local directory or s3://bucket/prefix); give one of those"
        )
    if not is_location(results_url):
        raise ConfigError(f"results {results!r} is empty; give a database URL or a location")
    kind = sink_kind(DEFAULT_LOCATION_KIND)
    kind.require()
    return kind


def sink_sections(given: Any) -> KindSections:
    """The sink kinds' options given (``{kind: options}``), each checked by its kind's model, as a run
    spec holds them (see :func:`~shardwise.kind_options.kind_sections`)."""
    return _OPTIONS.sections(given)


def sink_option_flags() -> dict[tuple[str, str], str]:
    """``{(kind, option): flag}``: plain, or ``--KIND-OPTION`` where two installed kinds share a flag."""
    return _OPTIONS.flags()


def options_for(kind: SinkKind, given: Mapping[str, KindOptions], results: str) -> SinkOptions:
    """The chosen kind's options from the run's given ones (the rest at their defaults); an option of
    another kind is refused, naming its flag and the kind it belongs to."""

    def refusal(option: str, value: Any, owner: Any, flag: str) -> str:
        return (
            f"{option} {value!r} applies to results in {owner.label}, and results go to {results!r} "
            f"({kind.label}); drop {flag}, or send the results there"
        )

    options = _OPTIONS.options_of(kind, given, refusal)
    return options  # type: ignore[return-value]  # the kind's own options model, a SinkOptions


def _results_in(kind: Any) -> str:
    return f"results in {kind.label}"


_OPTIONS = KindFamily(lambda: sink_kinds().values(), _results_in, ("results", "sink"))
