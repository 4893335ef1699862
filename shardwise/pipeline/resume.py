"""Resuming a run: its stored record and plan, checked against what the resume asks for, its lease taken.

A resume never re-plans (STYLE habit 1): it takes the run's record and plan
from the ledger, refuses a results target, precision, model version or source
other than the ones the run started with, and keeps the retry policy the run
was planned with. :func:`~shardwise.pipeline.prepare_run` calls it.
"""

from __future__ import annotations

import dataclasses
import logging
import shlex

from shardwise.errors import ConfigError
from shardwise.model import ModelInfo
from shardwise.model.generation import settings_given
from shardwise.pipeline.destination import results_place
from shardwise.pipeline.lease import Takeover, takeover_from
from shardwise.pipeline.spec import Resolver, RunSpec
from shardwise.pipeline.worker import open_spec_source
from shardwise.precision import versioned
from shardwise.records import RunRecord
from shardwise.results import Ledger
from shardwise.retry_policy import RetryPolicy
from shardwise.secrets.by_reference import by_reference, same_location
from shardwise.sources import SourcePlan

__all__ = ["recorded_retry", "resume_command", "resume_run"]

_log = logging.getLogger(__name__)


def resume_run(
    spec: RunSpec, ledger: Ledger, model: ModelInfo, resolve: Resolver, owner: str
) -> tuple[RunRecord, SourcePlan, Takeover]:
    """The stored record and plan of run ``spec.run.resume``, checked against what this resume asks for,
    and its lease taken (from whom: the :class:`Takeover`)."""
    assert spec.run.resume is not None
    summary = ledger.run_summary(spec.run.resume)
    if summary is None:
        raise ConfigError(
            f"run {spec.run.resume!r} is not in the ledger of {ledger.url}; nothing to resume. Resume a run "
            "id listed there (shardwise runs --results URL)"
        )
    took_over = takeover_from(summary, force=spec.run.force, owner=owner)
    record, plan = ledger.load(spec.run.resume)
    target = results_place(spec, resolve(spec.results_location)).recorded()
    if not same_location(record.results_table, target):
        raise ConfigError(
            f"run {spec.run.resume!r} wrote its results to {record.results_table!r}, not {target!r}; resume "
            "it with the --results, --results-table and --results-format it was started with"
        )
    if spec.run.precision not in ("auto", record.precision):
        raise ConfigError(
            f"run {spec.run.resume!r} was started in precision {record.precision}; it cannot resume in "
            f"{spec.run.precision}. Resume with --precision {record.precision} (or auto), or start a new run"
        )
    if record.model_version != versioned(model.version, record.precision):  # type: ignore[arg-type]
        # A generator's settings are part of its version: a resume must give them again, all of them.
        settings = settings_given(record.parameters)
        same = "model"
        if settings or spec.model.generation is not None:
            same = f"model and generation settings ({settings or 'none'})"
        raise ConfigError(
            f"run {spec.run.resume!r} was started with model version {record.model_version[:12]}; it cannot "
            f"resume with {model.name!r} version {model.version[:12]}. Resume with the same {same}, or "
            "start a new run"
        )
    source = open_spec_source(spec, resolve, plan)
    try:
        identity = by_reference(spec.source.location, source.identity)
    finally:
        source.close()
    if not same_location(record.source_identity, identity):
        raise ConfigError(
            f"run {spec.run.resume!r} read source {record.source_identity!r}, not {identity!r}; "
            "resume it with the source it read"
        )
    ledger.ensure()  # a ledger from an older release gains the columns its workers now write
    # Forced, or from a gone process of this host: only from the owner seen (see takeover_from).
    take_from = took_over.owner if spec.run.force or took_over.gone else None
    record, plan = ledger.start_run(record, plan, owner=owner, lease_s=spec.run.lease_s, take_from=take_from)
    return record, plan, took_over


def recorded_retry(spec: RunSpec, plan: SourcePlan, run_id: str) -> RunSpec:
    """``spec`` with the retry policy ``plan`` recorded (``spec``'s own for a plan recorded before)."""
    given = spec.run.retry
    recorded = RetryPolicy.from_params(plan.param("retry"), given)
    if recorded != given:
        _log.warning(
            "run %s keeps the retry policy it was planned with (deadline %g s, %d attempts), not this "
            "resume's (deadline %g s, %d attempts); start a new run to change it",
            run_id, recorded.deadline_s, recorded.attempts, given.deadline_s, given.attempts,
        )  # fmt: skip
    return dataclasses.replace(spec, run=spec.run.replace(retry=recorded))


def resume_command(run_id: str, *, ledger: str | None, results: str | None, source: str | None) -> str:
    """The command that finishes run ``run_id``, working as printed: ``shardwise run``, what finds the run's
    ledger as the run was given it (``--ledger``; else ``--source`` and ``--results``, which find it by
    the same rule, :func:`~shardwise.pipeline.destination.find_ledger`), and ``--resume RUN_ID``: the
    run's other parameters come from its record. A URL that holds a password is never shown; it stands
    as ``URL``, to be given again (as typed, or as ``env:NAME``)."""
    found = [("--ledger", ledger)] if ledger else [("--source", source)]
    if not ledger and results and results != source:
        found.append(("--results", results))
    given = [f"{flag} {_typed(value)}" for flag, value in found if value]
    return " ".join(["shardwise run", *given, "--resume", shlex.quote(run_id)])


def _typed(value: str) -> str:
    """``value`` as a shell takes it; a URL this process holds (``held:NAME``) or a masked one: ``URL``."""
    return "URL" if value.startswith("held:") or "***" in value else shlex.quote(value)
