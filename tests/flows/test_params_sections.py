"""The flow's parameters are a few typed sections, so the Prefect UI's form shows them as such."""

from __future__ import annotations

import ast
import inspect
from types import ModuleType

import pytest
from pydantic import BaseModel, ValidationError

from shardwise.flows.params import ScoreParams

SECTIONS = {
    "source": "SourceParams",
    "model": "ModelParams",
    "results": "ResultsParams",
    "run": "RunParams",
    "fanout": "FanoutParams",
}


def test_the_parameters_are_at_most_eight_fields_with_a_nested_model_per_section() -> None:
    assert len(ScoreParams.model_fields) <= 8, list(ScoreParams.model_fields)
    for name, section in SECTIONS.items():
        annotation = ScoreParams.model_fields[name].annotation
        assert isinstance(annotation, type) and issubclass(annotation, BaseModel), name
        assert annotation.__name__ == section
    generation = ScoreParams.model_fields["model"].annotation.model_fields["generation"].annotation  # type: ignore[union-attr]
    assert generation.__name__ == "GenerationParams"


def test_the_json_schema_has_the_sections() -> None:
    schema = ScoreParams.model_json_schema()
    for name, section in SECTIONS.items():
        assert section in schema["$defs"], section
        assert f"#/$defs/{section}" in str(schema["properties"][name]), schema["properties"][name]
    assert schema["required"] == ["source"]
    assert "generation" in schema["$defs"]["ModelParams"]["properties"]
    assert "options" in schema["$defs"]["ResultsParams"]["properties"]


def test_a_flat_parameter_is_refused_not_ignored() -> None:
    """A deployment written for the flat parameters fails loudly, naming the key."""
    with pytest.raises(ValidationError, match="table"):
        ScoreParams.model_validate({"source": {"location": "sqlite:///x.db"}, "table": "docs"})


def test_a_rule_within_a_section_and_one_across_keep_their_messages() -> None:
    with pytest.raises(ValidationError, match="--deployment 'x/y' would do nothing"):
        ScoreParams.model_validate({"source": {"location": "s"}, "fanout": {"deployment": "x/y"}})
    with pytest.raises(ValidationError, match="--image-root '/a' would do nothing"):
        ScoreParams.model_validate({"source": {"location": "s", "image_roots": ["/a"]}})


def test_the_form_s_generation_section_names_every_generation_setting_and_no_other() -> None:
    """The form's section is the settings with "not given" (None) for each, in the command line's
    spellings: ``unconstrained`` for ``constrained`` turned off, ``engine_options`` as NAME=VALUE."""
    from shardwise.flows.params import GenerationParams
    from shardwise.model.generation import SETTINGS, GenerationSettings

    settings = set(GenerationSettings.model_fields) - {"constrained"} | {"unconstrained"}
    assert set(GenerationParams.model_fields) == settings == set(SETTINGS)
    given = GenerationParams(
        temperature=0.5, seed=3, unconstrained=False, engine_options=["a=1"], engine="vllm"
    )
    assert given.settings() == GenerationSettings(
        temperature=0.5, seed=3, engine="vllm", engine_options={"a": "1"}
    )
    assert GenerationParams().settings() is None


def _declared(module: ModuleType) -> dict[str, set[str]]:
    """The fields each class of ``module`` declares in its own body, by class name (a class made by
    ``create_model`` declares none: its fields come from elsewhere)."""
    return {
        node.name: {
            line.target.id
            for line in node.body
            if isinstance(line, ast.AnnAssign)
            and isinstance(line.target, ast.Name)
            and not line.target.id.startswith("_")
        }
        for node in ast.walk(ast.parse(inspect.getsource(module)))
        if isinstance(node, ast.ClassDef)
    }


def test_each_field_is_declared_once_in_the_flow_or_in_the_engine() -> None:
    """A flow section subclasses the engine's settings class, or is made from its fields, and declares
    only what the flow alone reads (issue 46): no field of the form is declared again beside the
    engine's. ``options`` alone is declared in both, retyped: the form shows a section per installed
    kind, the engine holds those given. (A section made by ``create_model`` takes the engine's fields
    and spells out only those the form types otherwise: generation's ``engine_options``, the model's
    ``generation``.)"""
    from shardwise.flows import params
    from shardwise.model import generation
    from shardwise.pipeline import spec
    from shardwise.tasks import runners

    engine = _declared(spec) | _declared(generation) | _declared(runners)
    settings = (
        "SourceSpec",
        "ResultsSpec",
        "RunSettings",
        "FanoutSettings",
        "GenerationSettings",
        "ModelChoice",
    )
    twice = {
        (section, name): sorted(fields & engine[name] - {"options"})
        for section, fields in _declared(params).items()
        for name in settings
    }
    assert {pair: names for pair, names in twice.items() if names} == {}
