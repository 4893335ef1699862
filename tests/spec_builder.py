"""Run specs for tests, from the flat field names a test reads best (``table=``, ``shards=``, ``resume=``).

:class:`~shardwise.pipeline.RunSpec` is nested by section (source, model, results, ledger, run); each
flat name belongs to exactly one section, so a test names fields without spelling the sections out.
"""

from __future__ import annotations

from typing import Any

from shardwise.pipeline.spec import ModelChoice, ResultsSpec, RunSettings, RunSpec, SourceSpec
from shardwise.sinks.registry import results_options_model
from shardwise.sources.registry import source_options_model

_SOURCE = set(SourceSpec.model_fields) - {"location", "options"}


def _owners(sections: Any) -> dict[str, str]:
    return {
        o: kind for kind, section in sections.model_fields.items() for o in section.annotation.model_fields
    }


_SOURCE_KINDS = _owners(source_options_model())
"""The built-in source kinds' own options (``where``, ``query_timeout_s``) by flat name, each to its
kind: kept in ``options``, a section per kind."""
_SINK_KINDS = _owners(results_options_model())
_RUN = set(RunSettings.model_fields) | {"retry"}
_RESULTS = {"results_table": "table", "results_format": "format", "results_options": "options"}


def flat_spec(**fields: Any) -> RunSpec:
    """A :class:`RunSpec` from flat fields: ``source``, ``results`` and ``model`` name the location, the
    results location and the model; ``generation``, ``ledger`` and each section's own fields by name."""
    source = {"location": fields.pop("source")} | {k: fields.pop(k) for k in list(fields) if k in _SOURCE}
    source["options"] = _by_kind(
        {k: fields.pop(k) for k in list(fields) if k in _SOURCE_KINDS}, _SOURCE_KINDS
    )
    results = {"location": fields.pop("results"), "table": fields.pop("results_table")}
    results |= {_RESULTS[k]: fields.pop(k) for k in list(fields) if k in _RESULTS}
    if isinstance(results.get("options"), dict):  # flat names, each to its kind's section
        results["options"] = _by_kind(results["options"], _SINK_KINDS)
    model = ModelChoice(
        **{"name": fields.pop("model")} if "model" in fields else {},
        generation=fields.pop("generation", None),
    )
    run = {k: fields.pop(k) for k in list(fields) if k in _RUN}
    ledger, chunk_rows = fields.pop("ledger", None), fields.pop("chunk_rows", None)
    access = {"image_access": fields.pop("image_access")} if "image_access" in fields else {}
    if fields:
        raise TypeError(f"no RunSpec field named {sorted(fields)}")
    source_spec, results_spec = SourceSpec(**source), ResultsSpec(**results)
    return RunSpec(
        source_spec, results_spec, model, ledger, RunSettings(**run), chunk_rows=chunk_rows, **access
    )


def flat_fields(spec: RunSpec) -> dict[str, Any]:
    """``spec``'s fields by their flat names: what :func:`flat_spec` takes back."""
    fields: dict[str, Any] = {"source": spec.source.location, "results": spec.results_location}
    fields |= {k: getattr(spec.source, k) for k in _SOURCE}
    fields |= {
        k: v
        for o in spec.source.kind_options().values()
        for k, v in o.model_dump(exclude_defaults=True).items()
    }
    fields |= {k: getattr(spec.results, v) for k, v in _RESULTS.items()}
    fields |= {k: getattr(spec.run, k) for k in _RUN - {"retry_deadline_s", "retry_attempts"}}  # in retry
    fields |= {"chunk_rows": spec.chunk_rows, "image_access": spec.image_access}
    return fields | {"model": spec.model.name, "generation": spec.model.generation, "ledger": spec.ledger}


def _by_kind(flat: dict[str, Any], owners: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Flat options as a section per kind; a name no kind declares stays a section of its own (refused)."""
    sections: dict[str, dict[str, Any]] = {}
    for name, value in flat.items():
        if name in owners:
            sections.setdefault(owners[name], {})[name] = value
        else:
            sections[name] = value
    return sections


def respec(spec: RunSpec, **changes: Any) -> RunSpec:
    """``spec`` with ``changes``, by flat name."""
    return flat_spec(**(flat_fields(spec) | changes))
