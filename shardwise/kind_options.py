"""Options owned by a kind of connector: a source kind's or a sink kind's, each kind's its own typed value.

A kind (a source kind, a sink kind) declares its options as a frozen pydantic
model, a subclass of :class:`KindOptions`. A run carries them per kind, as
``(kind name, that kind's options)`` pairs (:func:`kind_sections`), never as
loose ``(option, value)`` pairs: two kinds may both declare ``delimiter``.
Where the run's kind is known, it takes its own section and one of another kind,
set away from its defaults, is refused naming its flag (:func:`options_of_kind`).
A default spelled out is not "given": a deployment that names every option's
default is never refused.

On the command line an option keeps its plain flag (``--where``, ``--index``)
while no other installed kind of its family declares the same flag; when two do,
each gets ``--KIND-OPTION`` (:func:`option_flags`). The form shows a section per
kind either way (:func:`sections_model`).

The families keep their own registries (:mod:`shardwise.sources.registry`,
:mod:`shardwise.sinks.registry`); this module holds what they do alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from shardwise.errors import ConfigError
from shardwise.flags import flag_name

__all__ = [
    "KindFamily",
    "KindOptions",
    "KindSections",
    "OptionOwner",
    "given_sections",
    "kind_sections",
    "option_flags",
    "options_of_kind",
    "sections_model",
]

KindSections = tuple[tuple[str, "KindOptions"], ...]
"""The kinds' options a run gives: ``(kind name, its options)`` for each kind given any, sorted by name."""


class KindOptions(BaseModel):
    """The options one kind owns; a kind's options class subclasses it (a kind without options uses it
    as it is).

    Each field is one ``--flag`` (its name, ``_`` as ``-``, or its
    :class:`~shardwise.flags.Flag`), typed, with its default and description as
    ``--help`` and the Prefect form show them. ``check()`` holds the rules
    between a kind's own options.
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


def option_flags(kinds: Iterable[OptionOwner]) -> dict[tuple[str, str], str]:
    """``{(kind, option): flag}`` for the options of ``kinds`` (one family's installed kinds): an option's
    own flag (``--where``), or ``--KIND-`` and that flag's name when another kind declares the same."""
    plain = {
        (kind.name, option): flag_name(option, info)
        for kind in kinds
        for option, info in kind.options.model_fields.items()
    }
    seen = Counter(plain.values())
    return {
        (kind, option): flag if seen[flag] == 1 else f"--{kind}-{flag.removeprefix('--')}"
        for (kind, option), flag in plain.items()
    }


def sections_model(name: str, doc: str, kinds: Iterable[OptionOwner]) -> type[BaseModel]:
    """A model with one section per kind that has options, under the kind's name: a flow parameter the
    Prefect form shows as a section per kind."""
    sections: dict[str, Any] = {k.name: (k.options, k.options()) for k in kinds if k.options.model_fields}
    model = create_model(  # type: ignore[call-overload]
        name, __config__=ConfigDict(extra="forbid", frozen=True), __doc__=doc, **sections
    )
    return model  # type: ignore[no-any-return]


def given_sections(sections: BaseModel) -> dict[str, KindOptions]:
    """The sections of a :func:`sections_model` value that set an option away from its default, by kind:
    what a run spec holds."""
    given = {name: getattr(sections, name) for name in type(sections).model_fields}
    return {name: options for name, options in given.items() if options.model_dump(exclude_defaults=True)}


def kind_sections(
    given: Any,
    kinds: Iterable[OptionOwner],
    label: Callable[[OptionOwner], str],
    family: tuple[str, str],
) -> KindSections:
    """``given`` (``{kind: its options}`` or such pairs, each a kind's options value or a mapping of
    them, as a spec is given them or reads them back from JSON) as :data:`KindSections`, each checked
    by its kind's model: a kind not installed, or a bad value, is refused naming the flag and the rule.
    Sections left at their defaults are dropped. ``label(kind)`` says what the kind reads or writes, for
    messages (``results in a Delta table``); ``family`` names the options and their kinds
    (``("results", "sink")``)."""
    try:
        sections = dict(given)
    except (TypeError, ValueError):
        raise ConfigError(
            f"{family[0]} options must map each {family[1]} kind to its options; got {given!r}"
        ) from None
    kinds = list(kinds)
    known = {k.name: k for k in kinds}
    checked: dict[str, KindOptions] = {}
    for name, options in sections.items():
        kind = known.get(name)
        if kind is None:
            owners = sorted(k.name for k in kinds if k.options.model_fields)
            raise ConfigError(
                f"{family[0]} options are given for {family[1]} kind {name!r}, which is not installed; "
                f"kinds with options: {', '.join(owners) or 'none'}"
            )
        if isinstance(options, kind.options):  # typed already (the form's section): its rules still apply
            options.check()
            value = options
        else:
            value = _validated(kind, options, label, kinds)
        if value.model_dump(exclude_defaults=True):
            checked[name] = value
    return tuple(sorted(checked.items()))


def options_of_kind(
    kind: OptionOwner,
    given: Mapping[str, KindOptions],
    kinds: Iterable[OptionOwner],
    label: Callable[[OptionOwner], str],
    refusal: Callable[[str, Any, OptionOwner, str], str],
) -> KindOptions:
    """``kind``'s own options from the run's given sections (its defaults when none is given). A section
    of another kind, set away from its defaults, is refused with ``refusal(option, value, owner, flag)``."""
    kinds = list(kinds)
    flags = option_flags(kinds)
    for name, options in given.items():
        if name == kind.name:
            continue
        changed = options.model_dump(exclude_defaults=True)
        if changed:
            option, value = next(iter(changed.items()))
            owner = next((k for k in kinds if k.name == name), None)
            if owner is not None:
                raise ConfigError(refusal(option, value, owner, flags[(name, option)]))
    own = given.get(kind.name)
    return own if own is not None else _validated(kind, {}, label, kinds)


@dataclass(frozen=True)
class KindFamily:
    """One family's installed kinds as far as their options go (the source kinds, the sink kinds): the
    functions above, each given the family's kinds, how a kind is named in messages and what the family
    calls its options and kinds, as its registry asks them."""

    kinds: Callable[[], Iterable[OptionOwner]]
    """The kinds installed now that load (asked on each call: a registry's cache can be cleared)."""
    label: Callable[[OptionOwner], str]
    """What a kind reads or writes, for messages (``results in a Delta table``)."""
    family: tuple[str, str]
    """What the options and their kinds are called (``("results", "sink")``)."""

    def sections_model(self, name: str, doc: str) -> type[BaseModel]:
        """See :func:`sections_model`."""
        return sections_model(name, doc, self.kinds())

    def sections(self, given: Any) -> KindSections:
        """See :func:`kind_sections`."""
        return kind_sections(given, self.kinds(), self.label, self.family)

    def flags(self) -> dict[tuple[str, str], str]:
        """``{(kind, option): flag}``: plain, or ``--KIND-OPTION`` where two installed kinds share a flag."""
        return option_flags(self.kinds())

    def options_of(
        self,
        kind: OptionOwner,
        given: Mapping[str, KindOptions],
        refusal: Callable[[str, Any, OptionOwner, str], str],
    ) -> KindOptions:
        """See :func:`options_of_kind`."""
        return options_of_kind(kind, given, self.kinds(), self.label, refusal)


def _validated(
    kind: OptionOwner, values: Any, label: Callable[[OptionOwner], str], kinds: list[OptionOwner]
) -> KindOptions:
    try:
        options = kind.options.model_validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        option = str(error["loc"][0]) if error["loc"] else "?"
        rule = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            raise ConfigError(
                f"{option} is not an option of {label(kind)}; its options: "
                f"{', '.join(kind.options.model_fields) or 'none'}"
            ) from None
        flag = option_flags(kinds).get((kind.name, option), flag_name(option, None))
        raise ConfigError(
            f"{option} is not valid for {label(kind)}: {rule}; see {flag} in shardwise run --help"
        ) from None
    options.check()
    return options
