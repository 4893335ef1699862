"""Source kinds, looked up by name, URL scheme or file suffix: the ``shardwise.sources`` entry points.

A source kind is a small object (:class:`SourceKind`) that says how a
location is recognised (the URL schemes of a database, the file suffixes of
a dataset) and opens a :class:`~shardwise.sources.base.Source` for it.
Shardwise registers its own kinds (SQL, Parquet, image folders, CSV and JSON
Lines) in its ``pyproject.toml`` exactly as another package would::

    [project.entry-points."shardwise.sources"]
    parquet = "shardwise.sources.parquet.kind:KIND"

Listing the names imports nothing (:func:`kind_names`); a kind's module is
imported when a location is matched against the kinds, so it should import its
heavy packages in ``open``: a missing one is then one line saying which
extra installs it (``pip install 'shardwise[NAME]'``).

A plan stores its kind's name (``SourcePlan.kind``), so a worker reopens the
same kind without listing the location again (:func:`open_kind`).

A kind owns its options (``SourceKind.options``, a :class:`SourceKindOptions`
model: each field is a ``--flag`` and a field of the flow's ``source.options``
section under the kind's name), the way a sink kind does: a SQL source's
``where`` and ``query_timeout_s``. Option names are unique across the kinds; a
run gives them flat (``{"where": "..."}``) and :func:`open_kind` hands the kind
its own, refusing one of another kind by its flag. What every kind that reads
a table takes (the table, key, text and image columns) stays in
:class:`SourceOptions`: a kind refuses there what it cannot read.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel

from shardwise.db.connect import database_scheme
from shardwise.db.errors import safe_url
from shardwise.entry_points import KindRegistry, entry_point_names
from shardwise.errors import ConfigError, SourceError
from shardwise.kind_options import KindFamily, KindOptions, KindSections
from shardwise.sources.base import Source

if TYPE_CHECKING:
    from shardwise.retry_policy import RetryPolicy
    from shardwise.sources.images.access import ImageAccess
    from shardwise.watch.events import Emitter
    from shardwise.watch.spec import WatchSpec
    from shardwise.watch.watcher import Seen, Watcher

__all__ = [
    "DEFAULT_FILE_KIND",
    "ENTRY_POINT_GROUP",
    "SourceKind",
    "SourceKindOptions",
    "SourceOptions",
    "clear_cache",
    "file_suffixes",
    "kind_at",
    "kind_names",
    "load_kinds",
    "open_kind",
    "open_location",
    "refuse_table",
    "source_kind",
    "source_option_flags",
    "source_options_model",
    "source_sections",
]

ENTRY_POINT_GROUP = "shardwise.sources"
DEFAULT_FILE_KIND = "parquet"
"""The kind a location goes to when its listing holds no file any kind claims (or cannot be listed): its
check says why in its own words (``no Parquet objects at ...``)."""


class SourceKindOptions(KindOptions):
    """The options one source kind owns; a kind's options class subclasses it (see
    :class:`~shardwise.kind_options.KindOptions`), a kind without any uses it as it is."""


@dataclass(frozen=True)
class SourceOptions:
    """What a run asks of its source, whatever its kind; each kind takes what applies and refuses the rest."""

    table: str | None = None
    key: str = "id"
    text_column: str = "text"
    input_columns: Mapping[str, str] | None = None
    image_column: str | None = None
    image_access: ImageAccess | None = None
    kind_options: Mapping[str, KindOptions] = field(default_factory=dict)
    """The kinds' own options the run gave, each kind's its own value by kind name (see
    :func:`source_sections`): :func:`open_kind` gives the kind opened its own, and refuses another's."""
    s3_client: Any | None = None
    retry: RetryPolicy | None = None
    more: Mapping[str, Any] = field(default_factory=dict)
    """Further keyword options for the kind's source class (a database source's pool settings, ...)."""

    @property
    def reads_columns(self) -> bool:
        """Whether a key, text or input column other than the defaults was asked for."""
        return self.key != "id" or self.text_column != "text" or bool(self.input_columns)

    def keywords(self) -> dict[str, Any]:
        """:attr:`more`, with the S3 client and the retry policy where the run gives them: the keyword
        options of a kind's source class."""
        more = dict(self.more)
        for name in ("s3_client", "retry"):
            if getattr(self, name) is not None:
                more[name] = getattr(self, name)
        return more


@runtime_checkable
class SourceKind(Protocol):
    """One kind of source, as its entry point gives it: an object, never a callable to call."""

    name: str
    """Its registry name, stored in plans (``sql``, ``parquet``, ``images``, ``csv``)."""
    label: str
    """What it reads, for messages: ``"Parquet files"``, ``"a database table"``."""
    extra: str | None
    """The extra of ``shardwise`` that installs its packages (``pip install 'shardwise[NAME]'``), or None."""
    schemes: tuple[str, ...]
    """The URL schemes of the databases it reads (``postgresql``, ``sqlite``); empty for a file kind."""
    suffixes: tuple[str, ...]
    """The file suffixes it reads, lower case (``.parquet``); empty for a database kind."""
    whole_files: bool
    """Whether each file is one row (an image folder), so that no column of it can be named."""
    options: type[SourceKindOptions]
    """Its options model (:class:`SourceKindOptions` itself when it owns none)."""

    def open(self, location: str, options: SourceOptions, own: SourceKindOptions) -> Source:
        """The source for ``location`` (a URL of its scheme, or a path, ``s3://`` prefix or glob);
        ``own`` is its options model's value, checked."""
        ...

    def on_this_host(self, location: str) -> bool:
        """Whether only this host reaches ``location`` (an SQLite file, a local path): workers on other
        hosts could not read it."""
        ...

    def watcher(self, spec: WatchSpec, emit: Emitter, *, seen: Seen | None = None, **options: Any) -> Watcher:
        """The watcher that announces new data at ``spec.source`` (``shardwise watch``); ``seen`` gives
        the files scored already, for a kind that plans by files; ``options`` go to its constructor."""
        ...


def kind_names() -> list[str]:
    """Names registered under ``shardwise.sources`` by installed packages, sorted; nothing is imported."""
    return entry_point_names(ENTRY_POINT_GROUP)


def load_kinds() -> dict[str, SourceKind | ConfigError]:
    """Every registered kind by name, imported (cached), Shardwise's own first and then the plug-ins' by
    name; a kind that cannot be loaded maps to why."""
    return _KINDS.loaded()


@functools.cache
def source_options_model() -> type[BaseModel]:
    """The options of every registered kind that has any, one section each under the kind's name: the
    flow's ``source.options`` parameter, which the Prefect form shows as a section per kind."""
    doc = "Options of the source kinds, a section each; only the section of the source's kind applies."
    return _OPTIONS.sections_model("SourceKindSections", doc)


def source_sections(given: Any) -> KindSections:
    """The kinds' options given (``{kind: options}``), each checked by its kind's model, as a run spec
    holds them (see :func:`~shardwise.kind_options.kind_sections`)."""
    return _OPTIONS.sections(given)


def source_option_flags() -> dict[tuple[str, str], str]:
    """``{(kind, option): flag}``: plain, or ``--KIND-OPTION`` where two installed kinds share a flag."""
    return _OPTIONS.flags()


def file_suffixes() -> tuple[str, ...]:
    """Every suffix a registered file kind reads (``.parquet``, ``.csv``, ``.png``...), lower case."""
    return tuple(s for k in _KINDS.usable() for s in k.suffixes)


def clear_cache() -> None:
    """Forget the loaded kinds, so that packages installed since are seen (tests, a long-lived process)."""
    _KINDS.clear()
    source_options_model.cache_clear()


def source_kind(name: str) -> SourceKind:
    """The kind registered as ``name``; a name no package registers is a :class:`ConfigError`."""
    return _KINDS.kind(name)


def kind_at(location: str) -> SourceKind:
    """The kind asked about ``location`` before its files are listed (what is on this host, how it is
    watched): the kind claiming a database URL's scheme, else :data:`DEFAULT_FILE_KIND`, the kind a
    location of no files yet goes to. A scheme no kind, or two kinds, claim is refused as
    :func:`open_location` refuses it."""
    scheme = database_scheme(location)
    if scheme is None:
        return source_kind(DEFAULT_FILE_KIND)
    return _claimant(scheme, location, _KINDS.usable())


def open_kind(kind: SourceKind, location: str, options: SourceOptions) -> Source:
    """``kind.open`` with its own options (another kind's, given, refused by its flag), and a missing
    package said in one line naming the extra that installs it."""

    shown = safe_url(location) if database_scheme(location) is not None else location  # no password

    def refusal(option: str, value: Any, owner: Any, flag: str) -> str:
        return (
            f"{option} {value!r} applies to {owner.name} sources, and source {shown!r} is read as a "
            f"{kind.name} source; drop {flag}"
        )

    own = _OPTIONS.options_of(kind, options.kind_options, refusal)
    try:
        return kind.open(location, options, own)  # type: ignore[arg-type]  # the kind's own model
    except ModuleNotFoundError as exc:
        raise ConfigError(_missing_package(kind, exc)) from exc


def open_location(location: str, options: SourceOptions, listed: Callable[[str], list[str]]) -> Source:
    """The source for ``location``: a database URL goes to the kind claiming its scheme; a path,
    ``file://`` or ``s3://`` location to the kind whose suffixes its files have. A scheme or a file
    that two kinds claim is refused in one line naming both: neither is handed the location.

    ``listed(path)`` lists the location's file names once; it raises :class:`SourceError` when the
    location cannot be listed, which leaves it to :data:`DEFAULT_FILE_KIND`, as does a listing with no
    file at all. Files of which no kind claims the suffix are an unknown format, refused in one line.
    """
    scheme = database_scheme(location)
    kinds = _KINDS.usable()
    if scheme is not None:
        return open_kind(_claimant(scheme, location, kinds), location, options)
    path = location.removeprefix("file://")
    files = [k for k in kinds if k.suffixes]
    # An image column is a column of a table: a folder of images is then no candidate.
    candidates = [k for k in files if not (k.whole_files and options.image_column is not None)]
    return open_kind(_by_suffix(path, candidates, files, listed), path, options)


def refuse_table(options: SourceOptions, what: str) -> None:
    """A file source is read whole: ``--table`` is refused, naming ``what`` it is."""
    if options.table is not None:
        raise ConfigError(
            f"table {options.table!r} names a database's table; {what} is read whole: drop --table"
        )


def _claimant(scheme: str, location: str, kinds: list[SourceKind]) -> SourceKind:
    """The one kind claiming database URLs of ``scheme``; none, or two, refused in one line."""
    claimants = [kind for kind in kinds if scheme in kind.schemes]
    if not claimants:
        raise ConfigError(_unknown_scheme(location.split("://", 1)[0], kinds))
    if len(claimants) > 1:  # never guess which one gets the URL (and its password)
        raise ConfigError(_claimed(f"source scheme {scheme!r}", f"{scheme}:// sources", claimants))
    return claimants[0]


def _by_suffix(
    path: str, kinds: list[SourceKind], files: list[SourceKind], listed: Callable[[str], list[str]]
) -> SourceKind:
    """The one kind of ``kinds`` whose suffixes the listed files have; files of two kinds are refused in
    one line, as are files that none of ``files`` (every file kind) reads."""
    default = next((k for k in kinds if k.name == DEFAULT_FILE_KIND), None)
    try:
        names = listed(path)
    except SourceError:
        names = []  # the default kind's own check says why the location cannot be read
    counts: dict[str, int] = {}
    known = tuple(s for k in files for s in k.suffixes)
    others = [name for name in names if not name.lower().endswith(known)]
    for name in names:
        owners = [k for k in kinds if name.lower().endswith(k.suffixes)]
        if len(owners) > 1:
            base = name.rstrip("/").rsplit("/", 1)[-1]
            suffix = next(s for s in owners[-1].suffixes if name.lower().endswith(s))
            raise ConfigError(
                _claimed(f"source file suffix {suffix!r} (of {base!r})", f"{suffix} files", owners)
            )
        if owners:
            counts[owners[0].name] = counts.get(owners[0].name, 0) + 1
    if len(counts) > 1:
        raise ConfigError(_mixture(path, counts, kinds))
    if counts:
        return next(k for k in kinds if k.name in counts)
    # One file named outright is read by the default kind whatever its name (a Parquet file without
    # a suffix); a listing of files that no kind reads is an unknown format.
    single = len(names) == 1 and names[0].rstrip("/") in (path, os.path.abspath(path))
    if others and len(others) == len(names) and not single:
        raise ConfigError(_unknown_files(others, files))
    if default is None:
        raise ConfigError(f"no source kind reads the files at {path!r}; known kinds: {_known(kinds)}")
    return default


def _mixture(path: str, counts: Mapping[str, int], kinds: list[SourceKind]) -> str:
    """Files of several kinds at one location: which, and how to choose. Where one kind's files are whole
    rows (an image folder's), ``--image-column`` chooses the others (a folder of images is then no
    candidate), or a location of those files alone the one."""
    by_name = {k.name: k for k in kinds}
    mixed = [by_name[name] for name in counts]
    whole = [k for k in mixed if k.whole_files]
    if len(mixed) != 2 or len(whole) != 1:
        held = ", ".join(
            f"{n} {name} files ({' '.join(by_name[name].suffixes)})" for name, n in counts.items()
        )
        return f"source {path!r} holds {held}; give a folder, glob or prefix that holds files of one kind"
    table = next(k for k in mixed if not k.whole_files)
    return (
        f"source {path!r} holds both {table.label} ({counts[table.name]}) and {whole[0].label} "
        f"({counts[whole[0].name]}); to score the {table.label}' image column pass --image-column NAME, to "
        f"score the {whole[0].label} give a folder or prefix that holds only them"
    )


def _claimed(what: str, reads: str, kinds: list[SourceKind]) -> str:
    named = " and ".join(f"{k.name!r} ({type(k).__module__})" for k in kinds)
    return (
        f"{what} is claimed by {len(kinds)} installed source kinds, {named}; uninstall the package of "
        f"all but one of them, so that one kind reads {reads}"
    )


def _unknown_files(others: list[str], kinds: list[SourceKind]) -> str:
    example = others[0].rstrip("/").rsplit("/", 1)[-1]
    return (
        f"the source location holds no file that a source kind reads ({len(others)} other files, such as "
        f"{example!r}); known kinds: {_known(kinds)}; give the location of the data files, or install a "
        f"package that registers a {ENTRY_POINT_GROUP!r} kind for that format"
    )


def _source_of(kind: Any) -> str:
    return f"a {kind.name} source"


def _known(kinds: list[SourceKind]) -> str:
    parts = []
    for kind in kinds:
        claims = [f"{s}://" for s in kind.schemes] + list(kind.suffixes)
        parts.append(f"{kind.name} ({' '.join(claims)})")
    return "; ".join(parts) or "none"


def _unknown_scheme(scheme: str, kinds: list[SourceKind]) -> str:
    return (
        f"source scheme {scheme!r} is not supported; use postgresql+psycopg://, sqlite:///, "
        f"s3://bucket/prefix, or a local path. Known kinds: {_known(kinds)}; a package that registers a "
        f"{ENTRY_POINT_GROUP!r} entry point for {scheme!r} adds it"
    )


def _missing_package(kind: SourceKind, exc: ModuleNotFoundError) -> str:
    fix = f"pip install 'shardwise[{kind.extra}]'" if kind.extra else f"pip install {exc.name or 'it'}"
    return f"source kind {kind.name!r} needs package {exc.name!r}, which is not installed; {fix}"


def _not_a_kind(name: str, found: Any) -> str | None:
    if not callable(found) and isinstance(found, SourceKind) and found.name == name:
        return None
    return (
        f"must be a SourceKind object named {name!r} (name, label, extra, schemes, suffixes, "
        "whole_files, options, open, on_this_host, watcher), not a class or function; fix the entry point"
    )


_KINDS: KindRegistry[SourceKind] = KindRegistry(
    ENTRY_POINT_GROUP,
    "source kind",
    _not_a_kind,
    "source kind {name!r} is not registered; known kinds: {known} (a plan made by a kind is read by that "
    "kind: install the package that registers {name!r})",
)
_OPTIONS = KindFamily(lambda: _KINDS.usable(), _source_of, ("source", "source"))
