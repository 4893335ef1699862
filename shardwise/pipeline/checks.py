"""Every check a run can pass or fail before anything is planned, written or started.

A mistake found here costs a second and one line; found inside a run it
costs a failed run in the ledger, a Failed flow run and a traceback. So the
checks run in the order a user would fix things (the model, the names, the
source, whether the model takes what the source holds, where results go and
whether an existing results table fits, the run ids and whether a resumed run
is still held by a live process, the device and the precision on it), each as
cheaply as it can be: the source runs its filter on no rows, or reads its
Parquet footers, and checks that its key is unique (free for a declared SQL
key, else a read of the key column); nothing is planned, no ledger row is
written, and no database file is created.
"""

from __future__ import annotations

import dataclasses

from shardwise.batch.device import resolve_device
from shardwise.errors import ConfigError
from shardwise.model import ModelInfo
from shardwise.model.generation import PromptChecked
from shardwise.model.run_bound import Reachable
from shardwise.pipeline.destination import ResultsPlace, ledger_url, results_place
from shardwise.pipeline.lease import takeover_from
from shardwise.pipeline.model_inputs import check_model_inputs
from shardwise.pipeline.redrive import RedriveSelection, redrive_keys
from shardwise.pipeline.spec import Resolver, RunSpec
from shardwise.pipeline.worker import Catalogue, chosen_spec, open_spec_source
from shardwise.precision import resolve_precision
from shardwise.results import Ledger
from shardwise.results.probe import LedgerNeed, check_ledger
from shardwise.sinks.naming import parse_table_name
from shardwise.sources import Source
from shardwise.sources.images.access import DEFAULT_MAX_BYTES

__all__ = ["CheckedRun", "check_run"]


@dataclasses.dataclass(frozen=True)
class CheckedRun:
    """What the checks found out on the way: the model's description, and why the run would have nothing
    to do when that is known already (a redrive whose dead letters did not change), else None."""

    model: ModelInfo
    idle: str | None = None


def check_run(
    spec: RunSpec, resolve: Resolver, catalogue: Catalogue, *, local_workers: bool, dry_run: bool = False
) -> CheckedRun:
    """Raise the :mod:`shardwise.errors` error a run of ``spec`` would meet first, if any; else say what the
    checks found (the model described, so that planning need not describe it again).

    ``local_workers`` says whether the shards will run on this host, so that
    this host's devices are the workers' (not so for a remote cluster): then
    an explicit precision the device cannot run is refused here, fp16 on a
    CPU included (see :func:`~shardwise.precision.resolve_precision`).
    Says why the run would have nothing to do, when that is known now: a
    redrive whose dead letters did not change. ``dry_run``: the run only
    plans, so its ledger needs to be readable, not writable.
    """
    model_spec = chosen_spec(catalogue, spec.model, resolve, spec.run.retry)
    model = model_spec.describe()
    spec.check_model(model)
    if isinstance(model_spec, PromptChecked):
        model_spec.check_prompts()  # a chat template that cannot render a prompt, before any row
    if isinstance(model_spec, Reachable):
        model_spec.check_reachable()  # a remote model: a refused key or an unknown model, in one line
    parse_table_name(spec.results.table)
    place = results_place(spec, resolve(spec.results_location))
    source, idle = open_spec_source(spec, resolve), None
    try:
        source.check()
        values = source.value_kind()
        check_model_inputs(model, values)
        _check_image_cap(spec, values.kind)
        place.check()
        # A --ledger that is no database URL, or a ledger that cannot serve this run, is refused here.
        check_ledger(ledger_url(spec, resolve), _ledger_need(spec, dry_run), makes_folders=not spec.ledger)
        _check_results_table(place, model, source)
        if spec.run.resume is not None or spec.run.redrive is not None:
            with Ledger(ledger_url(spec, resolve)) as ledger:
                if spec.run.resume is not None:
                    _check_resume(ledger, spec)
                if spec.run.redrive is not None:
                    target = place.target()
                    selection = redrive_keys(ledger, target, source, spec.run.redrive, spec.run.force)
                    idle = None if selection.keys else _nothing_to_redrive(selection)
    finally:
        source.close()
    if local_workers:
        resolve_precision(spec.run.precision, resolve_device(spec.run.device), model.outputs)
    return CheckedRun(model, idle)


def _check_image_cap(spec: RunSpec, kind: str) -> None:
    """An image byte cap for a source that reads no pictures would do nothing. Only a value other than
    the default is given (a deployment's defaults are never refused); the source kinds' own options are
    refused for another kind where the source opens (:func:`~shardwise.sources.registry.open_kind`)."""
    if spec.image_access.max_bytes != DEFAULT_MAX_BYTES and kind != "image":
        raise ConfigError(
            f"image_max_bytes {spec.image_access.max_bytes} caps the pictures an image column or "
            f"folder reads, and this run reads {kind}; drop --image-max-bytes, or give --image-column"
        )


def _ledger_need(spec: RunSpec, dry_run: bool) -> LedgerNeed:
    """A resume or redrive reads what a run recorded; a dry run reads; any other run writes."""
    if spec.run.resume is not None or spec.run.redrive is not None:
        return "existing"
    return "readable" if dry_run else "writable"


def _check_results_table(place: ResultsPlace, model: ModelInfo, source: Source) -> None:
    """Existing results have the layout this run writes: the model's outputs, the source's key type
    (where the source knows it before planning), the lineage columns and the primary key."""
    layout = place.layout(model.outputs, None)
    if source.params.get("key_type") in ("int", "text"):
        layout = dataclasses.replace(layout, key_type=source.params["key_type"])
    sink = place.open(layout)
    try:
        sink.check()
    finally:
        sink.close()


def _check_resume(ledger: Ledger, spec: RunSpec) -> None:
    """The run exists, and no other process holds it (unless forced); the ledger enforces it again,
    atomically, when the run starts."""
    assert spec.run.resume is not None
    ledger.load(spec.run.resume)
    summary = ledger.run_summary(spec.run.resume)
    assert summary is not None  # load() raised otherwise
    takeover_from(summary, force=spec.run.force)


def _nothing_to_redrive(selection: RedriveSelection) -> str:
    gone = f", {len(selection.missing)} no longer in the source" if selection.missing else ""
    done = f", {selection.redriven} already scored by an earlier redrive" if selection.redriven else ""
    return (
        f"nothing to redrive: none of the dead-lettered inputs of run {selection.run_id} changed since it "
        f"ran or was last redriven ({selection.unchanged} unchanged{done}{gone}); fix the rows first, or "
        "add --force to score them again as they are"
    )
