"""A JSON Schema that admits no value is refused while planning (issue 39, item 8), and one that admits
some value is never refused: each refused schema below is checked to have no valid value among a set
of candidates, and each accepted one to have a valid value, so the cases cannot drift from the truth."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema.validators import Draft202012Validator

from shardwise.errors import ConfigError
from shardwise.model.generation import GenerationSettings
from shardwise.model.structured import JsonSchema

EMPTY: list[tuple[Any, str]] = [
    (False, "at #, the schema false admits no value"),
    ({"enum": []}, "at #, enum is empty"),
    ({"not": {}}, "at #, not {} refuses every value"),
    ({"type": "string", "minLength": 5, "maxLength": 2}, "at #, minLength 5 is above maxLength 2"),
    (
        {"allOf": [{"type": "string"}, {"type": "integer"}]},
        "at #, its types and its allOf branches' types have no value in common",
    ),
    (
        {"type": "object", "properties": {"a": False}, "required": ["a"]},
        "at #/properties/a, the schema false admits no value, and property 'a' is required",
    ),
    (
        {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 3, "maximum": 1}},
            "required": ["n"],
        },
        "at #/properties/n, no integer lies in [3, 1] (minimum and maximum), and property 'n' is required",
    ),
    (
        {"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 2},
        "at #, no integer lies in (1, 2) (exclusiveMinimum and exclusiveMaximum)",
    ),
    ({"type": "number", "minimum": 2, "exclusiveMaximum": 2}, "at #, no number lies in [2, 2)"),
    (
        {"type": "object", "required": ["a"], "additionalProperties": False},
        "at #, property 'a' is required and additionalProperties forbids it",
    ),
    ({"anyOf": [False, {"enum": []}]}, "at #, every anyOf branch admits no value"),
    ({"type": "string", "enum": [1, 2]}, "at #, no value of enum [1, 2] passes the other keywords"),
    ({"const": "x", "type": "integer"}, 'at #, const "x" breaks the other keywords'),
    (
        {"$defs": {"n": {"type": "string", "minLength": 1, "maxLength": 0}}, "$ref": "#/$defs/n"},
        "at #/$defs/n, minLength 1 is above maxLength 0",
    ),
    ({"type": "array", "minItems": 1, "items": False}, "at #/items, the schema false admits no value"),
    ({"type": "object", "required": ["a", "b"], "maxProperties": 1}, "2 properties are required"),
    ({"allOf": [{"type": "integer", "minimum": 5}, {"maximum": 2}]}, "at #, no integer lies in [5, 2]"),
]

SATISFIABLE: list[Any] = [
    {"type": "string", "minLength": 2, "maxLength": 5},
    {"minLength": 5, "maxLength": 2},  # no type: any non-string passes
    {"type": ["string", "null"], "minLength": 5, "maxLength": 2},
    True,
    {},
    {"type": "object", "properties": {"a": False}},  # a forbidden property that is not required
    {"type": "integer", "exclusiveMinimum": 1, "maximum": 2},
    {"type": "number", "minimum": 2, "maximum": 2},
    {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"},
    {"type": "array", "items": False},  # the empty array
    {"type": "object", "required": ["a"], "additionalProperties": False, "patternProperties": {"^a$": {}}},
    {"enum": ["good", "bad"]},
    {"anyOf": [False, {"type": "null"}]},
]

CANDIDATES: list[Any] = [
    None, True, False, 0, 1, 2, 2.5, 3, 5, -1, "", "x", "abc", "abcdef", "good", [], [1], {}, {"a": 1},
    {"a": 1, "b": 2}, {"n": 2}, {"next": {}}, {"a": "x"},
]  # fmt: skip


@pytest.mark.parametrize(("schema", "said"), EMPTY, ids=[json.dumps(s)[:40] for s, _ in EMPTY])
def test_a_schema_that_admits_no_value_is_refused_saying_where(schema: Any, said: str) -> None:
    validator = Draft202012Validator(schema)
    assert not any(validator.is_valid(value) for value in CANDIDATES)  # the case is truly empty here
    with pytest.raises(ConfigError) as refused:
        GenerationSettings(json_schema=json.dumps(schema))
    message = str(refused.value)
    assert message.startswith("json_schema admits no value, so every row would fail: "), message
    assert said in message and "\n" not in message
    assert message.endswith("fix the schema so that some JSON value satisfies it")


@pytest.mark.parametrize("schema", SATISFIABLE, ids=[json.dumps(s)[:40] for s in SATISFIABLE])
def test_a_schema_some_value_satisfies_is_accepted(schema: Any) -> None:
    validator = Draft202012Validator(schema)
    assert any(validator.is_valid(value) for value in CANDIDATES)  # the case truly has a value
    assert JsonSchema.from_text(json.dumps(schema)).text == json.dumps(
        schema, sort_keys=True, ensure_ascii=True, separators=(",", ":")
    )
