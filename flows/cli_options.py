"""The options of ``run``, ``redrive`` and ``plan``, generated from the flow's :class:`ScoreParams`.

The parameter model is the one place where an option's name, type, choices,
default, description and rules live: the Prefect UI's form renders it, and
these options are made from it. A URL that holds a password is swapped for an
``env:`` name here, so Prefect never stores it in run parameters.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic_core import PydanticUndefined

from shardwise.flags import commands, flag_name

__all__ = [
    "FANOUT_OPTIONS",
    "MODEL_OPTIONS",
    "RESULTS_OPTIONS",
    "SOURCE_OPTIONS",
    "add_kind_options",
    "add_model_kind_options",
    "add_param_options",
    "add_score_options",
    "flag_at",
    "flag_for",
    "given_options",
    "refuse_missing_engine",
    "refuse_unencoded_urls",
    "score_params",
    "watch_spec",
]

# Options name fields of :class:`ScoreParams` by their dotted path (``source.table``, ``run.shards``);
# a path that names a section stands for each of its fields, in the model's order, but those no option sets.
SOURCE_OPTIONS = ("source",)
"""Where the rows are: the ``source`` section, in ``--help`` order."""
MODEL_OPTIONS = ("model.name", "model.generation")
"""The model and a generator's settings (``model.generation``)."""
RESULTS_OPTIONS = ("results.location", "results.table", "results.format", "ledger")
"""Where the results and the ledger go; each sink kind's options follow in a group of their own."""
RUN_OPTIONS = ("run",)
"""How the run goes: each field's :class:`~shardwise.flags.Flag` says which commands take it."""
FANOUT_OPTIONS = ("fanout",)
"""The fields that choose what runs the shards."""
_KIND_SECTIONS = frozenset({"source.options", "results.options"})
"""Sections of the kinds' own options, a section per kind: each kind's options form a ``--help`` group of
their own (:func:`add_kind_options`), so a section that holds one is not spread into its group."""
_FLAGS = {
    "model.name": "--model",
    "model.generation.engine_options": "--engine-option",  # repeated, one NAME=VALUE each
}
"""The model section's fields whose option is not ``--`` and the field's own name; every other field's
flag lives on the field (:class:`~shardwise.flags.Flag`)."""
_METAVARS = {
    "model.name": "NAME|DIR|MODULE:ATTR",
    "model.generation.prompt": "TEMPLATE",
    "model.generation.system": "TEXT",
    "model.generation.max_new_tokens": "N",
    "model.generation.temperature": "T",
    "model.generation.top_p": "P",
    "model.generation.seed": "S",
    "model.generation.json_schema": "FILE",
    "model.generation.engine_options": "NAME=VALUE",
    "model.endpoint.api_base": "URL",
    "model.endpoint.api_key": "env:NAME|secret:NAME",
    "model.endpoint.max_concurrency": "N",
    "model.endpoint.requests_per_minute": "N",
    "model.endpoint.tokens_per_minute": "N",
    "model.endpoint.timeout": "SECONDS",
    "model.endpoint.batch_poll_s": "SECONDS",
    "model.endpoint.tokenizer": "DIR",
}
"""The model section's metavars (its fields are another section's owner's to move onto the fields)."""


def flag_for(path: str) -> str:
    """The command-line option of a :class:`ScoreParams` field, by its dotted path: ``source.text_column``
    is ``--text-column``, ``source.location`` is ``--source``; a kind's option (``source.options.sql.where``)
    has its plain flag, or ``--KIND-OPTION`` where two installed kinds share it
    (:func:`~shardwise.kind_options.option_flags`)."""
    if path in _FLAGS:
        return _FLAGS[path]
    parts = path.split(".")
    if ".".join(parts[:2]) in _KIND_SECTIONS and len(parts) == 4:  # source.options.KIND.OPTION
        return _kind_flags(parts[0])[(parts[2], parts[3])]
    section, _, option = path.rpartition(".")
    return flag_name(option, _model_at(section).model_fields[option])


def _kind_flags(family: str) -> dict[tuple[str, str], str]:
    """``{(kind, option): flag}`` of the installed source kinds (``family`` ``source``) or sink kinds."""
    from shardwise.sinks.registry import sink_option_flags
    from shardwise.sources.registry import source_option_flags

    return source_option_flags() if family == "source" else sink_option_flags()


def _model_at(path: str) -> Any:
    """The type of the :class:`ScoreParams` field (or section) that ``path`` names."""
    from shardwise.flows.params import ScoreParams

    model: Any = ScoreParams
    for part in path.split(".") if path else ():
        model = model.model_fields[part].annotation
    return model


def flag_at(loc: Sequence[int | str]) -> str | None:
    """The option of the field a validation error's location names (``("run", "shards")`` is
    ``--shards``); None when it names a section, whose rule spans options, or nothing known."""
    from shardwise.flows.params import ScoreParams

    model: Any = ScoreParams
    path: list[str] = []
    for part in loc:
        if isinstance(part, int):  # an item of a list: the list's option
            break
        info = model.model_fields.get(part)
        if info is None:
            return None
        path.append(part)
        if not _is_section(info.annotation):
            return flag_for(".".join(path))
        model = info.annotation
    return None


def _is_section(annotation: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _leaves(path: str) -> list[tuple[str, Any]]:
    """``(dotted path, field info)`` of the field ``path`` names, or of each field of the section it names
    (nested sections flattened, internal fields left out)."""
    from shardwise.flows.params import ScoreParams

    model: Any = ScoreParams
    info: Any = None
    for part in path.split("."):
        info = model.model_fields[part]
        model = info.annotation
    if not _is_section(model):
        return [(path, info)] if commands(info) else []  # a field no option sets
    found: list[tuple[str, Any]] = []
    for name in model.model_fields:
        if f"{path}.{name}" not in _KIND_SECTIONS:
            found += _leaves(f"{path}.{name}")
    return found


def add_param_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, fields: Sequence[str], command: str = "run"
) -> None:
    """One option per :class:`ScoreParams` field, its help and default taken from the model.

    The model is the one definition: the Prefect UI's form, these options and
    their ``--help`` all come from it, so they cannot drift. Each option's
    dest is its field's dotted path, which :func:`score_params` nests.
    Options that are left out are left out of the model's input too, so the
    model's defaults apply, and its validators check every value given. A field's
    :class:`~shardwise.flags.Flag` names the scoring commands that take it (``--resume`` only ``run``).
    """
    for path in fields:
        for leaf, info in _leaves(path):
            if command in commands(info):
                parser.add_argument(flag_for(leaf), dest=leaf, **_typed(leaf, info))


def add_score_options(parser: argparse.ArgumentParser, command: str) -> None:
    """The options of ``command`` (``run``, ``redrive`` or ``plan``): a ``--help`` group per section of
    :class:`ScoreParams` (each sink kind's options in a group of their own after the results), each
    field that the command takes (see :class:`~shardwise.flags.Flag`)."""
    from shardwise.flows.params import FanoutParams, ModelParams, RunParams, SourceParams

    def group(title: str, section: Any) -> argparse._ArgumentGroup:
        return parser.add_argument_group(title, str(section.__doc__).rstrip("."))

    add_param_options(group("source", SourceParams), SOURCE_OPTIONS, command)
    add_kind_options(parser, "source.options", _source_group)
    add_param_options(group("model and generation", ModelParams), MODEL_OPTIONS, command)
    add_model_kind_options(parser, command)
    results = "Where the results and the run ledger go; each results kind's options follow, a group each"
    add_param_options(parser.add_argument_group("results", results), RESULTS_OPTIONS, command)
    add_kind_options(parser, "results.options", _results_group)
    add_param_options(group("run", RunParams), RUN_OPTIONS, command)
    add_param_options(group("fan-out", FanoutParams), FANOUT_OPTIONS, command)


def add_model_kind_options(parser: argparse.ArgumentParser, command: str) -> None:
    """The options of each installed model kind that has any, a ``--help`` group per kind's section
    (``model.endpoint``: a remote model's endpoint, key reference and limits), titled by the model it is
    for."""
    from shardwise.flows.params import ModelParams
    from shardwise.model.kinds import option_sections

    for section, kind in option_sections().items():
        title = kind.one.removeprefix("a ").removeprefix("an ")
        text = ModelParams.model_fields[section].description
        add_param_options(parser.add_argument_group(title, text), [f"model.{section}"], command)


def add_kind_options(
    parser: argparse.ArgumentParser, path: str, heading: Callable[[str], tuple[str, str]]
) -> None:
    """The options of each installed kind in the ``path`` section (``source.options``,
    ``results.options``), a ``--help`` group per kind titled ``heading(kind name)`` (one flag per
    option, ``--KIND-OPTION`` where two kinds declare it, see :mod:`shardwise.kind_options`). Each
    option's dest is ``PATH.KIND.OPTION``, which :func:`score_params` nests as the flow's parameter."""
    for name in _model_at(path).model_fields:
        title, text = heading(name)
        add_param_options(parser.add_argument_group(title, text), [f"{path}.{name}"])


def _source_group(name: str) -> tuple[str, str]:
    return (
        f"a {name} source",
        f"options of the {name} source kind; refused for a source of another kind",
    )


def _results_group(name: str) -> tuple[str, str]:
    from shardwise.sinks.registry import sink_kind

    return (
        f"results in {sink_kind(name).label} (--results-format {name})",
        f"options of the {name} sink kind; refused for results of another kind",
    )


def _typed(name: str, info: Any) -> dict[str, Any]:
    """argparse's settings for a model field: its help, choices or type, and how it is given."""
    options: dict[str, Any] = {"default": argparse.SUPPRESS, "help": _help(name, info)}
    kinds = _kinds(info.annotation)
    if kinds == {bool}:
        options["action"] = "store_true"
        return options
    if any(get_origin(k) is list for k in kinds):
        options.update(action="append", metavar=_metavar(name, info))  # one per use
        return options
    literals = [a for k in kinds if get_origin(k) is Literal for a in get_args(k)]
    if literals:
        options["choices"] = literals
    else:
        options["metavar"] = _metavar(name, info)
    number = int if int in kinds else float if float in kinds else None
    if number is not None:
        options["type"] = _number(number)
    elif name in _FILE_READERS:
        options["type"] = _FILE_READERS[name]
    options["required"] = info.is_required()
    return options


def _metavar(path: str, info: Any) -> str:
    from shardwise.flags import metavar

    return _METAVARS.get(path) or metavar(path.rsplit(".", 1)[-1], info)


def _kinds(annotation: Any) -> set[Any]:
    """The types a field accepts, ``None`` left out: ``int | None`` is ``{int}``."""
    args = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)
    return {a for a in args if a is not type(None)}


def _help(name: str, info: Any) -> str:
    text = str(info.description or "")
    if name == "model.name":
        text += _known_models()
    if info.default == []:  # a repeatable option given no value
        text += " (default: none)"
    elif info.default not in (None, False, PydanticUndefined):
        text += f" (default: {info.default})"
    return text.replace("%", "%%")  # argparse %-formats help


def _known_models() -> str:
    """The model names known when the parser is built: the built-ins and the installed plug-ins."""
    from shardwise.models import known_models

    return (
        f" Known names: {', '.join(known_models())}; a plug-in can also be given as package.module:attribute "
        "(docs: how-to/models.md)."
    )


def _number(kind: type) -> Any:
    def parse(value: str) -> Any:
        try:
            return kind(value)
        except ValueError:
            wanted = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{value!r} is not {wanted}") from None

    parse.__name__ = kind.__name__
    return parse


def _json_schema_file(path: str) -> str:
    """The JSON Schema in the file ``path`` (``--json-schema FILE``), as its text, checked.

    The file must be a regular file of at most :data:`~shardwise.model.structured.MAX_SCHEMA_BYTES` (a
    FIFO or ``/dev/zero`` is refused before a byte is read, see :mod:`shardwise.bounded_read`), and
    hold a JSON Schema within the bounds of :mod:`shardwise.model.structured`. The text
    travels as it is: Prefect leaves a string parameter alone, where it would take a ``$ref`` in an
    object parameter for a block reference.
    """
    from shardwise.bounded_read import read_regular_file
    from shardwise.errors import ConfigError
    from shardwise.model.structured import MAX_SCHEMA_BYTES, JsonSchema

    try:
        data = read_regular_file(path, what="the schema file", max_bytes=MAX_SCHEMA_BYTES)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path!r} is not UTF-8 text ({exc.reason}); save it as UTF-8") from None
        JsonSchema.from_text(text, where=repr(path))
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


_FILE_READERS = {"model.generation.json_schema": _json_schema_file}
"""Fields whose option names a file, and what reads it: the value the field gets is what it returns."""


def refuse_missing_engine(params: Any) -> None:  # params: ScoreParams
    """Refuse a generation engine whose package is not installed (vLLM) as soon as the options are read.

    The run's own checks refuse it too, as they describe the model, but only once torch and the model's
    files are loaded (the refusal took 26.7 s on two busy cores, others 5 s), for a check that needs
    neither."""
    from shardwise.model.kinds import engine_of

    settings = params.model.generation.settings()
    engine = None if settings is None else engine_of(settings.engine)
    if engine is not None:
        engine.require(params.model.name)


def score_params(args: argparse.Namespace, **extra: Any):  # -> ScoreParams
    """The flow's parameters from the options given, each nested by its dest's dotted path (see
    :func:`add_param_options`); ``extra`` holds what the subcommand implies, by section.

    A URL holding a password travels as a ``held:`` name (see :func:`_by_name`).
    """
    from shardwise.flows.params import ScoreParams

    return ScoreParams(**given_options(args, **extra))


def given_options(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """The options given, nested by section as :class:`ScoreParams` takes them, not yet checked: see
    :func:`score_params` (a resume lays them over the stored run's, :mod:`flows.resumed`)."""
    from shardwise.flows.params import ScoreParams

    refuse_unencoded_urls(args)
    given: dict[str, Any] = {}
    for dest, value in vars(args).items():
        path = dest.split(".")
        if path[0] in ScoreParams.model_fields and (len(path) > 1 or not _is_section_name(dest)):
            _put(given, path, value)
    _merge(given, extra)
    source, fanout = given.setdefault("source", {}), given.get("fanout", {})
    if source.get("image_roots"):  # relative to where the command is typed; a blank one is refused after
        source["image_roots"] = [os.path.abspath(r) if r.strip() else r for r in source["image_roots"]]
    runner = fanout.get("runner", "thread")
    remote = runner == "deployment" or (fanout.get("address") is not None and runner in ("dask", "ray"))
    for where, section, name in (
        (source, "source", "location"),
        (given.get("results", {}), "results", "location"),
    ):
        if isinstance(where.get(name), str):
            where[name] = _by_name(where[name], section, remote)
    if isinstance(given.get("ledger"), str):
        given["ledger"] = _by_name(given["ledger"], "ledger", remote)
    return given


def _is_section_name(name: str) -> bool:
    from shardwise.flows.params import ScoreParams

    return _is_section(ScoreParams.model_fields[name].annotation)


def _put(tree: dict[str, Any], path: Sequence[str], value: Any) -> None:
    for part in path[:-1]:
        tree = tree.setdefault(part, {})
    tree[path[-1]] = value


def _merge(tree: dict[str, Any], extra: dict[str, Any]) -> None:
    """``extra``'s values into ``tree``, section by section."""
    for name, value in extra.items():
        if isinstance(value, dict) and isinstance(tree.get(name), dict):
            _merge(tree[name], value)
        else:
            tree[name] = value


_URL_OPTIONS = {
    "source": "--source",
    "source.location": "--source",
    "results": "--results",
    "results.location": "--results",
    "ledger": "--ledger",
}
"""The dests that may hold a URL (``watch`` and ``runs`` name theirs ``source`` and ``results``)."""


def refuse_unencoded_urls(args: argparse.Namespace) -> None:
    """Refuse a ``--source``, ``--results`` or ``--ledger`` URL whose password is not percent-encoded,
    naming the option and showing nothing of the URL (see :mod:`shardwise.secrets.url_syntax`), before any
    other code reads it. A name such as ``env:DB_URL`` is checked when it is resolved."""
    from shardwise.secrets.url_syntax import refuse_unencoded

    for dest, flag in _URL_OPTIONS.items():
        value = getattr(args, dest, None)
        if isinstance(value, str):
            refuse_unencoded(value, flag)


def watch_spec(args: argparse.Namespace):  # -> WatchSpec
    """What ``shardwise watch`` watches, from the options given (each option's dest is the field's name)."""
    from dataclasses import fields

    from shardwise.watch import WatchSpec

    return WatchSpec(**{f.name: getattr(args, f.name) for f in fields(WatchSpec) if hasattr(args, f.name)})


def _by_name(url: str | None, name: str, remote: bool = False) -> str | None:
    """A URL holding a secret travels as ``held:NAME``, so Prefect never stores it in run parameters.

    The URL stays in this process's memory (:func:`~shardwise.tasks.connections.hold`), never in
    an environment variable that child processes would inherit; local workers get it inside each
    shard task's call. Workers of a cluster elsewhere would get it over the network, so then it is
    refused.
    """
    from shardwise.errors import ConfigError
    from shardwise.secrets.redact import has_password, redact_url
    from shardwise.tasks.connections import hold

    if url is None or not has_password(url):  # the URL parser decides, as the engine will read it
        return url
    if remote:
        raise ConfigError(
            f"{redact_url(url)} holds a password, which must not travel to workers on other hosts; set it on "
            "the workers (and here) as an environment variable, e.g. export DB_URL=..., and pass env:DB_URL"
        )
    return hold(name, url)
