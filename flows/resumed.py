"""``shardwise run --resume RUN_ID``: the stored run's parameters, with what a resume may change.

A resume never re-plans (STYLE habit 1), so it needs only what finds the run's ledger: ``--results``
or ``--ledger`` as the run was given them (or ``--source``, where the ledger is the source's database).
The rest comes from the run's record in the ledger. Options a resume may change (:data:`RESUME_MAY_CHANGE`:
budgets, runner, workers, threads, retry settings, its lease) are taken; any other option given must agree
with the stored run, or it is refused naming it. A location the record holds only as a name this process
cannot read (a URL with a password, held in the memory of the command that started the run) must be
given again; the resume's own checks then match it to the run's by fingerprint
(:func:`~shardwise.pipeline.resume.resume_run`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from shardwise.errors import ConfigError
from shardwise.flows.params import ScoreParams

__all__ = ["RESUME_MAY_CHANGE", "resumed_params"]

RESUME_MAY_CHANGE = frozenset(
    {
        "run.resume",
        "run.force",
        "run.lease_s",
        "run.budget_usd",
        "run.budget_tokens",
        "run.retry_deadline_s",
        "run.retry_attempts",
        "fanout.runner",
        "fanout.workers",
        "fanout.threads",
        "fanout.address",
        "fanout.deployment",
        "source.options.sql.query_timeout_s",
        "source.image_roots",
        "source.image_buckets",
        "source.image_max_bytes",
    }
)
"""What a resume may set anew: how this invocation runs the stored plan, never what the plan is (the
source's read limits too: docs/how-to/where-filter.md, images-sources.md)."""
_FINDS_LEDGER = ("ledger", "results.location", "source.location")
"""What finds the run's ledger; taken as given, the resume's checks match each to the run's."""
_NOT_RESUMED = {"run": {"redrive": None, "dry_run": False}}
"""Stored fields a resume does not repeat: a redrive chose its keys when it was planned."""


def resumed_params(given: Mapping[str, Any]) -> ScoreParams:
    """The parameters of a resume of run ``given["run"]["resume"]``: the stored run's, with ``given`` (the
    options of the command, nested by section) laid over them as the module docstring says."""
    run_id = given["run"]["resume"]
    stored = _stored_parameters(given, run_id)
    tree = _merged(copy.deepcopy(stored), _NOT_RESUMED)
    for path, value in _leaves(given):
        if path not in RESUME_MAY_CHANGE and path not in _FINDS_LEDGER and not _unreadable(_at(stored, path)):
            _refuse_other(stored, path, value, run_id)
        _put(tree, path, value)
    for path in _FINDS_LEDGER:
        if _unreadable(_at(tree, path)):
            from shardwise.flows.cli_options import flag_for

            raise ConfigError(
                f"run {run_id!r} was given its {flag_for(path)} as a URL holding a password, which its "
                f"ledger does not keep; give {flag_for(path)} again with the resume (the URL, or env:NAME)"
            )
    return ScoreParams(**tree)


def _stored_parameters(given: Mapping[str, Any], run_id: str) -> dict[str, Any]:
    """The parameters run ``run_id`` was recorded with, from the ledger the options given find."""
    from shardwise.pipeline.destination import find_ledger
    from shardwise.results import Ledger
    from shardwise.results.probe import check_ledger
    from shardwise.tasks.connections import resolve

    ledger = given.get("ledger")
    results = _at(given, "results.location")
    source = _at(given, "source.location")
    if not (ledger or results or source):
        raise ConfigError(
            f"--resume {run_id} finds the run in its ledger, and no option says where that is; give "
            "--results (or --ledger) as the run was given them: shardwise run --results URL --resume RUN_ID"
        )
    url = find_ledger(ledger, results or source, source, resolve)
    check_ledger(url, "existing")  # a mistyped path is refused, never made into an empty ledger
    with Ledger(url) as found:
        record, _ = found.load(run_id)  # a run it does not hold is refused, naming how to list those it does
    return dict(record.parameters)


def _refuse_other(stored: dict[str, Any], path: str, value: Any, run_id: str) -> None:
    """Refuse an option a resume may not change when it differs from the stored run's (both checked by
    the parameters' model, so ``--shards 4`` agrees with a stored 4)."""
    from shardwise.flows.cli_options import flag_for

    before = _checked(stored, path)
    now = _checked(_merged(copy.deepcopy(stored), _tree(path, value)), path)
    if now != before:
        raise ConfigError(
            f"{flag_for(path)} {_shown(value)} differs from run {run_id!r}'s {_shown(before)}, and a resume "
            f"keeps the run's plan: drop {flag_for(path)} (the run's own is used), or start a new run; a "
            "resume may change only budgets, runner, workers, threads, retry settings, its lease and the "
            "source's read limits"
        )


def _checked(tree: dict[str, Any], path: str) -> Any:
    """The value at ``path`` once the parameters' model has read ``tree`` (None where it refuses it)."""
    try:
        return _at(ScoreParams(**tree).model_dump(), path)
    except (ValidationError, ConfigError):
        return None


def _shown(value: Any) -> str:
    return "(not given)" if value is None else repr(value)


def _unreadable(value: Any) -> bool:
    """A stored location this process cannot read: held by the command that started the run, or
    masked in the record (a password the form was given in the URL)."""
    return isinstance(value, str) and (value.startswith("held:") or "***" in value)


def _leaves(tree: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for name, value in tree.items():
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, f"{prefix}{name}.")
        elif not isinstance(value, Mapping):
            yield f"{prefix}{name}", value


def _at(tree: Mapping[str, Any], path: str) -> Any:
    for part in path.split("."):
        if not isinstance(tree, Mapping) or part not in tree:
            return None
        tree = tree[part]
    return tree


def _tree(path: str, value: Any) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    _put(tree, path, value)
    return tree


def _put(tree: dict[str, Any], path: str, value: Any) -> None:
    *sections, name = path.split(".")
    for part in sections:
        tree = tree.setdefault(part, {})
    tree[name] = value


def _merged(tree: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    for name, value in extra.items():
        if isinstance(value, Mapping) and isinstance(tree.get(name), dict):
            _merged(tree[name], value)
        else:
            tree[name] = copy.deepcopy(value)
    return tree
