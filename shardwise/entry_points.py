"""One loader for the plug-in groups (``shardwise.sources``, ``shardwise.sinks``, ``shardwise.models``).

Each registry asks :func:`load_entry_points` for its group: every name an
installed package registers, loaded, Shardwise's own first and then the
plug-ins' by name. One that cannot be had (its module fails to import, the
object is not what the group takes, two packages register the name) maps to
a :class:`~shardwise.errors.ConfigError` naming it, and the others load: one
broken package fails only the runs that choose its kind, never a command
that lists the kinds. Listing the names alone imports nothing
(:func:`entry_point_names`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

from shardwise.errors import ConfigError

__all__ = ["KindRegistry", "Registered", "entry_point_names", "load_entry_points"]

_K = TypeVar("_K")


@dataclass(frozen=True)
class Registered:
    """One registered name: where its entry point points, and the object there or why it cannot be had."""

    where: str
    """The entry point's ``module:attribute``, for messages."""
    package: str
    """The distribution that registers it, ``name version``."""
    found: Any
    """The loaded object, or the :class:`ConfigError` that says why there is none."""


def entry_point_names(group: str) -> list[str]:
    """The names registered under ``group`` by installed packages, sorted; nothing is imported."""
    return sorted({point.name for point in entry_points(group=group)})


def load_entry_points(
    group: str, what: str, accept: Callable[[str, Any], str | None], only: str | None = None
) -> dict[str, Registered]:
    """Every name registered under ``group`` (or just ``only``), loaded: built-ins first, then by name.

    ``what`` names a member in messages (``"sink kind"``); ``accept(name, found)`` says what is wrong
    with a loaded object (``None``: nothing). A name whose object cannot be had maps to a
    :class:`Registered` whose ``found`` is the :class:`ConfigError` saying why, in one line.
    """
    points: dict[str, list[EntryPoint]] = {}
    for point in sorted(entry_points(group=group), key=_built_in_first):
        if only is None or point.name == only:
            points.setdefault(point.name, []).append(point)
    return {name: _load(name, found, what, accept) for name, found in points.items()}


class KindRegistry(Generic[_K]):
    """One plug-in group's kinds (the sink kinds, the source kinds, the model kinds), loaded once (until
    :meth:`clear`) and looked up by name: what each registry module asks of its group."""

    def __init__(self, group: str, what: str, accept: Callable[[str, Any], str | None], unknown: str) -> None:
        """``what`` and ``accept`` are :func:`load_entry_points`'; ``unknown`` refuses a name nobody
        registers, a :meth:`str.format` template of ``name`` and ``known`` (the registered names)."""
        self.group = group
        self._what, self._accept, self._unknown = what, accept, unknown
        self._loaded: dict[str, _K | ConfigError] | None = None

    def loaded(self) -> dict[str, _K | ConfigError]:
        """Every registered kind by name, built-in ones first: the kind, or why it cannot be had."""
        if self._loaded is None:
            found = load_entry_points(self.group, self._what, self._accept)
            self._loaded = {name: registered.found for name, registered in found.items()}
        return self._loaded

    def usable(self) -> list[_K]:
        """The kinds that loaded, in the order :meth:`loaded` has them."""
        return [kind for kind in self.loaded().values() if not isinstance(kind, ConfigError)]

    def kind(self, name: str) -> _K:
        """The kind registered as ``name``: one nobody registers, or that cannot be loaded, is refused."""
        kinds = self.loaded()
        found = kinds.get(name)
        if found is None:
            raise ConfigError(self._unknown.format(name=name, known=", ".join(sorted(kinds)) or "none"))
        if isinstance(found, ConfigError):
            raise found
        return found

    def clear(self) -> None:
        """Forget the loaded kinds, so that packages installed since are seen."""
        self._loaded = None


def _load(
    name: str, points: list[EntryPoint], what: str, accept: Callable[[str, Any], str | None]
) -> Registered:
    first = points[0]
    registered = Registered(first.value, _package(first), None)
    if len({point.value for point in points}) > 1:  # one distribution seen twice on sys.path is one
        both = "; ".join(sorted(f"{_package(point)}: {point.value}" for point in points))
        return _refused(
            registered,
            f"{what} {name!r} is registered by {len(points)} installed packages ({both}); uninstall one",
        )
    shown = f"{what} {name!r} ({first.value})"
    try:
        found = first.load()
    except ModuleNotFoundError as exc:
        return _refused(
            registered,
            f"{shown} needs package {exc.name!r}, which is not installed; install it (on every worker "
            "too), or uninstall the package that registers it",
        )
    except Exception as exc:
        return _refused(
            registered,
            f"{shown} cannot be loaded: {type(exc).__name__}: {exc}; fix or uninstall the package that "
            "registers it",
        )
    problem = accept(name, found)
    if problem is not None:
        return _refused(registered, f"{shown} {problem}")
    return Registered(registered.where, registered.package, found)


def _refused(registered: Registered, message: str) -> Registered:
    return Registered(registered.where, registered.package, ConfigError(message))


def _built_in_first(point: EntryPoint) -> tuple[bool, str]:
    """Shardwise's own entry points (its distribution's) first, then by name: a built-in kind is
    matched and checked before any plug-in's, whatever the names."""
    dist = getattr(point, "dist", None)
    return (dist is None or dist.metadata["Name"] != "shardwise", point.name)


def _package(point: EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "(unknown)"
