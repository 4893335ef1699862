"""The options of ``run``, ``redrive`` and ``plan``, generated from the flow's :class:`ScoreParams`.

The parameter model is the one place where an option's name, type, choices,
default, description and rules live: the Prefect UI's form renders it, and
these options are made from it. A URL that holds a password is swapped for an
``env:`` name here, so Prefect never stores it in run parameters.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic_core import PydanticUndefined

__all__ = [
    "FANOUT_OPTIONS",
    "GENERATION_OPTIONS",
    "SOURCE_OPTIONS",
    "add_param_options",
    "add_sink_options",
    "flag_for",
    "refuse_unencoded_urls",
    "score_params",
    "watch_spec",
]


GENERATION_OPTIONS = (
    "prompt",
    "system",
    "chat",
    "max_new_tokens",
    "temperature",
    "top_p",
    "seed",
    "json_schema",
    "unconstrained",
)
"""The fields that only a generator (a causal language model) takes; part of its model version."""
SOURCE_OPTIONS = (
    "source",
    "table",
    "key",
    "text_column",
    "text_pair_column",
    "image_column",
    "image_roots",
    "image_buckets",
    "image_max_bytes",
    "where",
    "query_timeout_s",
    "model",
    *GENERATION_OPTIONS,
    "results",
    "results_table",
    "results_format",
    "ledger",
    "shards",
    "rows_per_shard",
    "only_new",
    "device",
    "precision",
    "min_agreement",
)
"""The :class:`ScoreParams` fields that ``run``, ``redrive`` and ``plan`` all take, in ``--help`` order."""
FANOUT_OPTIONS = ("runner", "workers", "address", "threads", "deployment")
"""The fields that choose what runs the shards; their own ``--help`` group."""
_FLAGS = {
    "redrive": "--run",
    "query_timeout_s": "--query-timeout",
    "retry_deadline_s": "--retry-deadline",
    "image_roots": "--image-root",  # repeated, one folder each
    "image_buckets": "--image-bucket",
}
"""Fields whose option is not simply ``--field-name``."""
_METAVARS = {
    "source": "URL|PATH|env:NAME",
    "results": "URL|DIR|s3://...|env:NAME",
    "ledger": "URL|env:NAME",
    "table": "TABLE",
    "key": "COLUMN",
    "text_column": "COLUMN",
    "text_pair_column": "COLUMN",
    "image_column": "COLUMN",
    "image_roots": "DIR",
    "image_buckets": "BUCKET",
    "image_max_bytes": "BYTES",
    "where": "SQL",
    "model": "NAME|DIR|MODULE:ATTR",
    "prompt": "TEMPLATE",
    "system": "TEXT",
    "max_new_tokens": "N",
    "temperature": "T",
    "top_p": "P",
    "seed": "S",
    "json_schema": "FILE",
    "results_table": "TABLE",
    "shards": "N",
    "rows_per_shard": "N",
    "min_agreement": "COSINE",
    "max_tokens": "N",
    "workers": "N",
    "threads": "N",
    "deployment": "FLOW/NAME",
    "resume": "RUN_ID",
    "redrive": "RUN_ID",
    "lease_s": "SECONDS",
    "query_timeout_s": "SECONDS",
    "retry_deadline_s": "SECONDS",
    "retry_attempts": "N",
}


def flag_for(field: str) -> str:
    """The command-line option of a :class:`ScoreParams` field: ``text_column`` is ``--text-column``."""
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


def add_param_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, fields: Sequence[str]
) -> None:
    """One option per :class:`ScoreParams` field, its help and default taken from the model.

    The model is the one definition: the Prefect UI's form, these options and
    their ``--help`` all come from it, so they cannot drift. Options that are
    left out are left out of the model's input too, so the model's defaults
    apply, and its validators check every value given.
    """
    from shardwise.flows.params import ScoreParams

    for name in fields:
        parser.add_argument(flag_for(name), dest=name, **_typed(name, ScoreParams.model_fields[name]))


def add_sink_options(parser: argparse.ArgumentParser) -> None:
    """The options of each installed sink kind, a ``--help`` group per kind (one flag per option: their
    names are unique across kinds, see :mod:`shardwise.sinks.registry`). Each option's dest is
    ``results_options.KIND.OPTION``, which :func:`score_params` nests as the flow's parameter."""
    from shardwise.sinks.registry import sink_kinds

    for name, kind in sink_kinds().items():
        if not kind.options.model_fields:
            continue
        group = parser.add_argument_group(
            f"results in {kind.label} (--results-format {name})",
            f"options of the {name} sink kind; refused for results of another kind",
        )
        for option, info in kind.options.model_fields.items():
            group.add_argument(
                flag_for(option), dest=f"results_options.{name}.{option}", **_typed(option, info)
            )


def _typed(name: str, info: Any) -> dict[str, Any]:
    """argparse's settings for a model field: its help, choices or type, and how it is given."""
    options: dict[str, Any] = {"default": argparse.SUPPRESS, "help": _help(name, info)}
    kinds = _kinds(info.annotation)
    if kinds == {bool}:
        options["action"] = "store_true"
        return options
    if any(get_origin(k) is list for k in kinds):
        options.update(action="append", metavar=_METAVARS.get(name, name.upper()))  # one per use
        return options
    literals = [a for k in kinds if get_origin(k) is Literal for a in get_args(k)]
    if literals:
        options["choices"] = literals
    else:
        options["metavar"] = _METAVARS.get(name, name.upper())
    number = int if int in kinds else float if float in kinds else None
    if number is not None:
        options["type"] = _number(number)
    elif name in _FILE_READERS:
        options["type"] = _FILE_READERS[name]
    options["required"] = info.is_required()
    return options


def _kinds(annotation: Any) -> set[Any]:
    """The types a field accepts, ``None`` left out: ``int | None`` is ``{int}``."""
    args = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)
    return {a for a in args if a is not type(None)}


def _help(name: str, info: Any) -> str:
    text = str(info.description or "")
    if name == "model":
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

    The file must be a regular file of at most :data:`~shardwise.structured.MAX_SCHEMA_BYTES` (a
    FIFO or ``/dev/zero`` is refused before a byte is read, see :mod:`shardwise.bounded_read`), and
    hold a JSON Schema within the bounds of :mod:`shardwise.structured`. The text
    travels as it is: Prefect leaves a string parameter alone, where it would take a ``$ref`` in an
    object parameter for a block reference.
    """
    from shardwise.bounded_read import read_regular_file
    from shardwise.errors import ConfigError
    from shardwise.structured import MAX_SCHEMA_BYTES, JsonSchema

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


_FILE_READERS = {"json_schema": _json_schema_file}
"""Fields whose option names a file, and what reads it: the value the field gets is what it returns."""


def score_params(args: argparse.Namespace, **extra: object):  # -> ScoreParams
    """The flow's parameters from the options given; ``extra`` holds what the subcommand implies.

    A URL holding a password travels as an ``env:`` name (see :func:`_by_name`).
    """
    from shardwise.flows.params import ScoreParams

    refuse_unencoded_urls(args)
    given = {name: getattr(args, name) for name in ScoreParams.model_fields if hasattr(args, name)}
    sections: dict[str, dict[str, Any]] = {}
    for dest, value in vars(args).items():
        if dest.startswith("results_options."):
            _, kind, option = dest.split(".")
            sections.setdefault(kind, {})[option] = value
    if sections:
        given["results_options"] = sections
    given.update(extra)
    if given.get("image_roots"):  # relative to where the command is typed; a blank one is refused after
        given["image_roots"] = [os.path.abspath(r) if r.strip() else r for r in given["image_roots"]]
    runner = given.get("runner", "thread")
    remote = runner == "deployment" or (given.get("address") is not None and runner in ("dask", "ray"))
    for name in ("source", "results", "ledger"):
        if isinstance(given.get(name), str):
            given[name] = _by_name(given[name], name, remote)
    return ScoreParams(**given)


def refuse_unencoded_urls(args: argparse.Namespace) -> None:
    """Refuse a ``--source``, ``--results`` or ``--ledger`` URL whose password is not percent-encoded,
    naming the option and showing nothing of the URL (see :mod:`shardwise.url_syntax`), before any
    other code reads it. A name such as ``env:DB_URL`` is checked when it is resolved."""
    from shardwise.url_syntax import refuse_unencoded

    for name in ("source", "results", "ledger"):
        value = getattr(args, name, None)
        if isinstance(value, str):
            refuse_unencoded(value, flag_for(name))


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
    from shardwise.redact import has_password, redact_url
    from shardwise.tasks.connections import hold

    if url is None or not has_password(url):  # the URL parser decides, as the engine will read it
        return url
    if remote:
        raise ConfigError(
            f"{redact_url(url)} holds a password, which must not travel to workers on other hosts; set it on "
            "the workers (and here) as an environment variable, e.g. export DB_URL=..., and pass env:DB_URL"
        )
    return hold(name, url)
