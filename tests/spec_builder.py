"""Run specs for tests, from the flat field names a test reads best (``table=``, ``shards=``, ``resume=``).

:class:`~shardwise.pipeline.RunSpec` is nested by section (source, model, results, ledger, run); each
flat name belongs to exactly one section, so a test names fields without spelling the sections out.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from shardwise.pipeline.spec import ModelChoice, ResultsSpec, RunSettings, RunSpec, SourceSpec
from shardwise.sources.registry import source_options_model

_SOURCE = {f.name for f in dataclasses.fields(SourceSpec)} - {"location", "options"}
_SOURCE_KINDS = {
    o for section in source_options_model().model_fields.values() for o in section.annotation.model_fields
}
"""The source kinds' own options (``where``, ``query_timeout_s``): flat names too, kept in ``options``."""
_RUN = set(RunSettings.model_fields) | {"retry"}
_RESULTS = {"results_table": "table", "results_format": "format", "results_options": "options"}


def flat_spec(**fields: Any) -> RunSpec:
    """A :class:`RunSpec` from flat fields: ``source``, ``results`` and ``model`` name the location, the
    results location and the model; ``generation``, ``ledger`` and each section's own fields by name."""
    source = {"location": fields.pop("source")} | {k: fields.pop(k) for k in list(fields) if k in _SOURCE}
    source["options"] = {k: fields.pop(k) for k in list(fields) if k in _SOURCE_KINDS}
    results = {"location": fields.pop("results"), "table": fields.pop("results_table")}
    results |= {_RESULTS[k]: fields.pop(k) for k in list(fields) if k in _RESULTS}
    if isinstance(results.get("options"), dict):
        results["options"] = tuple(sorted(results["options"].items()))
    model = ModelChoice(
        **{"name": fields.pop("model")} if "model" in fields else {},
        generation=fields.pop("generation", None),
    )
    run = {k: fields.pop(k) for k in list(fields) if k in _RUN}
    ledger, chunk_rows = fields.pop("ledger", None), fields.pop("chunk_rows", None)
    if fields:
        raise TypeError(f"no RunSpec field named {sorted(fields)}")
    return RunSpec(
        SourceSpec(**source), ResultsSpec(**results), model, ledger, RunSettings(**run), chunk_rows
    )


def flat_fields(spec: RunSpec) -> dict[str, Any]:
    """``spec``'s fields by their flat names: what :func:`flat_spec` takes back."""
    fields: dict[str, Any] = {"source": spec.source.location, "results": spec.results.location}
    fields |= {k: getattr(spec.source, k) for k in _SOURCE} | spec.source.kind_options()
    fields |= {k: getattr(spec.results, v) for k, v in _RESULTS.items()}
    fields |= {k: getattr(spec.run, k) for k in _RUN} | {"chunk_rows": spec.chunk_rows}
    return fields | {"model": spec.model.name, "generation": spec.model.generation, "ledger": spec.ledger}


def respec(spec: RunSpec, **changes: Any) -> RunSpec:
    """``spec`` with ``changes``, by flat name."""
    return flat_spec(**(flat_fields(spec) | changes))
