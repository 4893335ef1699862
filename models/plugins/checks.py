"""The checks a plug-in model passes before any shard runs, each failing with one line.

A plug-in is someone else's code, so what the engine relies on is checked at
the door: the :class:`~shardwise.model.ModelInfo` that ``describe()`` gives
(name, version, outputs, max length), its stability (the version keys the
results table, so it must be a content hash, the same on every call and every
worker), and the agreement of the loaded :class:`~shardwise.model.Model` with
that description.
"""

from __future__ import annotations

import reprlib
from dataclasses import fields
from typing import get_args, get_type_hints

from shardwise.errors import ConfigError
from shardwise.model import ModelInfo, OutputColumn

__all__ = ["brief", "check_info", "check_loaded", "check_stable", "spec_problem", "what"]

_KINDS: tuple[str, ...] = get_args(get_type_hints(OutputColumn)["kind"])
_MODEL_METHODS = ("prepare", "collate", "run", "to_columns")
"""The model contract's steps (:class:`~shardwise.model.Model`): what the engine calls, in this order."""
_MODEL_MEMBERS = ("name", "version", "max_length", "device", "outputs", *_MODEL_METHODS)
_SELF_BATCHING_MEMBERS = ("name", "version", "max_length", "device", "outputs", "score_window")
_HASH_HINT = (
    "a model version must be a content hash of its weights, config and tokenizer (shardwise.hashing."
    "hash_files or hash_state make one), the same on every call and every worker: not a timestamp, a "
    "counter or a random id"
)


def brief(exc: BaseException) -> str:
    """``Type: first line of the message``: an error raised inside a plug-in, on one line."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def what(value: object, short: bool = False) -> str:
    """What a value is, for a message: ``'x' (type str)``, or with ``short`` ``module 'json'``."""
    if short and hasattr(value, "__name__"):
        return f"{type(value).__name__} {value.__name__!r}"
    return f"{reprlib.repr(value)} (type {type(value).__name__})"


def spec_problem(value: object) -> str | None:
    """Why ``value`` is not a ModelSpec instance (a class is not one either), or None when it is one."""
    if isinstance(value, type):
        return "a class; give an instance of it"
    missing = [name for name in ("name", "describe", "load") if not hasattr(value, name)]
    if missing:
        return f"it lacks {', '.join(missing)}"
    methods = [getattr(value, name, None) for name in ("describe", "load")]
    if not all(callable(method) for method in methods):
        return "its describe and load are not methods"
    return None


def check_info(info: object, spec_name: str, where: str) -> None:
    """``info`` is a well formed ModelInfo of the spec named ``spec_name``; else one ConfigError line."""
    if not isinstance(info, ModelInfo):
        raise ConfigError(
            f"{where}: describe() returned {what(info)}, not a shardwise.model.ModelInfo; return "
            "ModelInfo(name, version, outputs, max_length)"
        )
    if info.name != spec_name:
        raise ConfigError(
            f"{where}: describe() names the model {info.name!r} but the spec is named {spec_name!r}; "
            "give both the same name"
        )
    version = info.version
    if not isinstance(version, str) or not version or any(c.isspace() for c in version):
        raise ConfigError(f"{where}: describe() gave version {version!r}; {_HASH_HINT}")
    if not _positive_int(info.max_length):
        raise ConfigError(
            f"{where}: max_length {info.max_length!r} is not a positive whole number; give the longest "
            "input the model takes in tokens, special tokens included"
        )
    if not isinstance(info.pairs, bool):
        raise ConfigError(f"{where}: pairs {info.pairs!r} is not True or False; say whether it scores pairs")
    _check_outputs(info.outputs, where)


def _check_outputs(outputs: object, where: str) -> None:
    if not isinstance(outputs, tuple) or not outputs:
        raise ConfigError(
            f"{where}: outputs {reprlib.repr(outputs)} is not a non-empty tuple of OutputColumn; declare "
            "each result column, e.g. (OutputColumn('embedding', 'vector', 384),)"
        )
    for i, out in enumerate(outputs):
        if not isinstance(out, OutputColumn):
            raise ConfigError(f"{where}: outputs[{i}] is {what(out)}, not an OutputColumn")
        if out.kind not in _KINDS:
            raise ConfigError(
                f"{where}: output {out.name!r} has kind {out.kind!r}; kinds are: {', '.join(_KINDS)}"
            )
        if out.kind == "vector" and not _positive_int(out.dim):
            raise ConfigError(
                f"{where}: vector output {out.name!r} needs a positive whole dim; got {out.dim!r}"
            )
        if out.kind != "vector" and out.dim is not None:
            raise ConfigError(
                f"{where}: {out.kind} output {out.name!r} has dim {out.dim!r}; dim is for vectors only: "
                "leave it None"
            )
        if out.count is not False and (out.count is not True or out.kind != "int"):
            raise ConfigError(
                f"{where}: {out.kind} output {out.name!r} has count {out.count!r}; count=True marks an int "
                "output whose sum over rows a run reports (tokens generated): leave it False otherwise"
            )
    from shardwise.sinks.naming import check_outputs

    try:  # the sinks' own rules for column names, so the two cannot drift apart
        check_outputs(outputs)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def check_stable(first: ModelInfo, second: ModelInfo, where: str) -> None:
    """Two descriptions of the same plug-in agree: the version above all."""
    if first.version != second.version:
        raise ConfigError(
            f"{where}: describe() gave version {_short(first.version)!r}, then {_short(second.version)!r}; "
            f"{_HASH_HINT}"
        )
    for item in fields(ModelInfo):
        a, b = getattr(first, item.name), getattr(second, item.name)
        if a != b:
            raise ConfigError(
                f"{where}: describe() gave {item.name} {reprlib.repr(a)}, then {reprlib.repr(b)}; a "
                "description must depend only on the model's files"
            )


def check_loaded(model: object, info: ModelInfo, where: str) -> None:
    """The loaded model implements the contract (prepare, collate, run, to_columns; or score_window, a
    model that batches by itself) and says what ``describe()`` said of it."""
    members = _SELF_BATCHING_MEMBERS if hasattr(model, "score_window") else _MODEL_MEMBERS
    missing = [n for n in members if not hasattr(model, n)]
    if missing:
        raise ConfigError(
            f"{where}: load() returned {what(model)}, not a Model (it lacks {', '.join(missing)})"
        )
    methods = ("score_window",) if members is _SELF_BATCHING_MEMBERS else _MODEL_METHODS
    not_methods = [n for n in methods if not callable(getattr(model, n))]
    if not_methods:
        raise ConfigError(
            f"{where}: the loaded model has no method {', '.join(not_methods)}; a model implements "
            "prepare(value), collate(items, multiple), run(batch) and to_columns(outputs), or, batching "
            "by itself, score_window(values)"
        )
    for name in ("name", "version", "outputs", "max_length"):
        loaded, described = getattr(model, name), getattr(info, name)
        if loaded != described:
            fix = _HASH_HINT if name == "version" else "the two must agree"
            raise ConfigError(
                f"{where}: the loaded model's {name} is {reprlib.repr(loaded)} but describe() gave "
                f"{reprlib.repr(described)}; {fix}"
            )


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _short(version: str) -> str:
    return version if len(version) <= 32 else version[:16] + "..."
