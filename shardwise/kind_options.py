"""Options owned by a kind of connector: a source kind's or a sink kind's, one ``--flag`` each.

A kind (a source kind, a sink kind) declares its options as a frozen pydantic
model, a subclass of :class:`KindOptions`. Option names are unique across the
installed kinds of one family, so each stays a plain flag (``--where``,
``--index``) and a run spec holds the options given as flat ``(name, value)``
pairs. From those pairs this module finds each option's owner, checks its value
with the owner's model, and refuses an option given for another kind than the
run's. A default spelled out is not "given": a deployment that names every
option's default is never refused.

The families keep their own registries (:mod:`shardwise.sources.registry`,
:mod:`shardwise.sinks.registry`); this module holds what they do alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import EntryPoint
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from shardwise.errors import ConfigError

__all__ = [
    "KindOptions",
    "OptionOwner",
    "built_in_first",
    "check_unique_options",
    "flag_of",
    "flat_options",
    "grouped_options",
    "option_pairs",
    "options_of_kind",
    "sections_model",
]


class KindOptions(BaseModel):
    """The options one kind owns; a kind's options class subclasses it (a kind without options uses it
    as it is).

    Each field is one ``--flag`` (its name, ``_`` as ``-``), typed, with its
    default and description as ``--help`` and the Prefect form show them.
    ``check()`` holds the rules between a kind's own options.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    def check(self) -> None:
        """Refuse options that contradict each other (a :class:`ConfigError`, naming the flags)."""


class OptionOwner(Protocol):
    """A kind as far as its options go."""

    @property
    def name(self) -> str: ...

    @property
    def options(self) -> type[KindOptions]: ...


def flag_of(option: str, options: type[BaseModel] | None = None) -> str:
    """The command-line flag of an option: ``index_metric`` is ``--index-metric``, unless its field in
    ``options`` names another (``Field(json_schema_extra={"flag": "--query-timeout"})``)."""
    info = None if options is None else options.model_fields.get(option)
    extra = info.json_schema_extra if info is not None else None
    if isinstance(extra, dict) and isinstance(extra.get("flag"), str):
        return str(extra["flag"])
    return "--" + option.replace("_", "-")


def built_in_first(point: EntryPoint) -> tuple[bool, str]:
    """A sort key putting the entry points Shardwise registers itself (its distribution's) first, then
    by name: a built-in kind is matched and checked before any plug-in's, whatever the names."""
    dist = getattr(point, "dist", None)
    return (dist is None or dist.metadata["Name"] != "shardwise", point.name)


def check_unique_options(kind: OptionOwner, where: str, owners: dict[str, str], family: str) -> None:
    """Refuse a kind (registered at ``where``) declaring an option another kind of ``family`` declares;
    ``owners`` maps the options seen so far to their kinds and takes this kind's."""
    for option in kind.options.model_fields:
        if option in owners:
            raise ConfigError(
                f"{family} kind {kind.name!r} ({where}) declares option {option!r}, which {family} kind "
                f"{owners[option]!r} declares already; rename the option in {where}"
            )
        owners[option] = kind.name


def sections_model(name: str, doc: str, kinds: Iterable[OptionOwner]) -> type[BaseModel]:
    """A model with one section per kind that has options, under the kind's name: a flow parameter the
    Prefect form shows as a section per kind."""
    sections: dict[str, Any] = {k.name: (k.options, k.options()) for k in kinds if k.options.model_fields}
    model = create_model(  # type: ignore[call-overload]
        name, __config__=ConfigDict(extra="forbid", frozen=True), __doc__=doc, **sections
    )
    return model  # type: ignore[no-any-return]


def flat_options(sections: BaseModel) -> dict[str, Any]:
    """``{option: value}`` of the options set away from their defaults, from a :func:`sections_model`
    value: what a run spec holds (option names are unique across kinds)."""
    flat: dict[str, Any] = {}
    for name in type(sections).model_fields:
        section = getattr(sections, name)
        for option, info in type(section).model_fields.items():
            value = getattr(section, option)
            if value != info.default:
                flat[option] = value
    return flat


def option_pairs(options: Any, what: str) -> tuple[tuple[str, Any], ...]:
    """``options`` (pairs or a mapping, as a spec is given them or reads them back from JSON) as pairs
    sorted by name: hashable, so a spec holding them is."""
    try:
        return tuple(sorted(dict(options).items()))
    except (TypeError, ValueError):
        raise ConfigError(f"{what} options must map option names to values; got {options!r}") from None


def grouped_options(
    options: Mapping[str, Any],
    kinds: Iterable[OptionOwner],
    label: Callable[[OptionOwner], str],
    family: tuple[str, str],
) -> dict[str, KindOptions]:
    """``{option: value}`` (flat) grouped by the kind declaring each, each group checked by that kind's
    model: an option no kind declares, or a bad value, is refused naming the flag and the rule.
    ``label(kind)`` says what the kind reads or writes, for messages (``results in a Delta table``);
    ``family`` names the options and their kinds (``("results", "sink")``)."""
    known = {k.name: k for k in kinds}
    grouped: dict[str, dict[str, Any]] = {}
    for option, value in options.items():
        owner = next((k for k in known.values() if option in k.options.model_fields), None)
        if owner is None:
            names = sorted(o for k in known.values() for o in k.options.model_fields)
            raise ConfigError(
                f"{family[0]} option {option!r} is declared by no installed {family[1]} kind; known: "
                f"{', '.join(names) or 'none'}"
            )
        grouped.setdefault(owner.name, {})[option] = value
    return {name: _validated(known[name], values, label) for name, values in grouped.items()}


def options_of_kind(
    kind: OptionOwner,
    given: Mapping[str, Any],
    kinds: Iterable[OptionOwner],
    label: Callable[[OptionOwner], str],
    refusal: Callable[[str, Any, OptionOwner], str],
    family: tuple[str, str],
) -> KindOptions:
    """``kind``'s options from the run's given ones (the rest at their defaults). An option of another
    kind, set away from its default, is refused with ``refusal(option, value, owner)``."""
    kinds = list(kinds)
    grouped = grouped_options(given, kinds, label, family)
    for name, options in grouped.items():
        if name == kind.name:
            continue
        changed = options.model_dump(exclude_defaults=True)
        if changed:
            option, value = next(iter(changed.items()))
            owner = next(k for k in kinds if k.name == name)
            raise ConfigError(refusal(option, value, owner))
    return grouped.get(kind.name) or _validated(kind, {}, label)


def _validated(
    kind: OptionOwner, values: Mapping[str, Any], label: Callable[[OptionOwner], str]
) -> KindOptions:
    try:
        options = kind.options.model_validate(dict(values))
    except ValidationError as exc:
        error = exc.errors()[0]
        option = str(error["loc"][0]) if error["loc"] else "?"
        rule = str(error["msg"]).removeprefix("Value error, ")
        raise ConfigError(
            f"{option} is not valid for {label(kind)}: {rule}; see {flag_of(option, kind.options)} in "
            "shardwise run --help"
        ) from None
    options.check()
    return options
