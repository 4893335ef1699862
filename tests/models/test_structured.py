"""Structured output: JSON checked against a schema, and decoding held to it by a grammar (xgrammar).

The parser's rules run on hand-written outputs; the generator runs a tiny
random Llama (``tests/hf_builders.py``), which writes noise unless decoding
is constrained: unconstrained, its rows are dead letters saying why;
constrained, every row is a JSON value under the schema that stops at its
closing brace, whatever batch it falls in.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from hf_builders import tiny_causal_lm

from shardwise import ConfigError, Engine, EngineConfig
from shardwise.batch.engine import RowResult
from shardwise.errors import OutputError
from shardwise.model.generation import GenerationSettings
from shardwise.model.structured import MAX_SCHEMA_BYTES, JsonSchema
from shardwise.models.hf.causal.model import HFCausalSpec, HFGenerator

pytest.importorskip("transformers")

CPU = torch.device("cpu")
SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"enum": ["good", "bad", "neutral"]},
        "urgent": {"type": "boolean"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    },
    "required": ["label", "urgent"],
    "additionalProperties": False,
}
TEXTS = ["hello world", "Summarise this text, please", "x" * 80, "a", "Which label fits best?", "bye"]


# The parser's rules.


def test_valid_output_parses_to_its_value() -> None:
    value = JsonSchema(SCHEMA).parse('{"label": "good", "urgent": false, "tags": ["a"]}')
    assert value == {"label": "good", "urgent": False, "tags": ["a"]}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"label": "good", "urgent": true', "not JSON: Expecting ',' delimiter"),
        ('{"label": "good", "urgent": true} and more', "not JSON: Extra data"),
        ("", "not JSON: Expecting value"),
        ('{"label": "good", "urgent": NaN}', "not JSON: NaN is not a JSON number"),
        ('{"label": "go\nod", "urgent": true}', "not JSON: Invalid control character"),
        ('{"label": "good\\u0000", "urgent": true}', "not JSON: a string holds NUL"),
        ('{"label": "\\ud800", "urgent": true}', "not JSON: a string holds a lone UTF-16 surrogate"),
        ('{"label": "great", "urgent": true}', "schema: $.label: 'great' is not one of"),
        ('{"label": "good"}', "schema: $: 'urgent' is a required property"),
        ('{"label": "good", "urgent": true, "tags": ["a", 3]}', "schema: $.tags[1]: 3 is not one of"),
        ("[1, 2]", "schema: $: [1, 2] is not of type 'object'"),
    ],
)
def test_invalid_output_is_an_output_error_saying_why(text: str, reason: str) -> None:
    with pytest.raises(OutputError) as caught:
        JsonSchema(SCHEMA).parse(text)
    assert str(caught.value).startswith(reason), caught.value


def test_a_long_bad_output_is_quoted_short() -> None:
    with pytest.raises(OutputError) as caught:
        JsonSchema(SCHEMA).parse("x" * 500)
    assert len(str(caught.value)) < 200 and str(caught.value).endswith("...")


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "objet"}, "json_schema is not a valid JSON Schema: $.type:"),
        ({"properties": {"a": {"minLength": -1}}}, "json_schema is not a valid JSON Schema"),
        ([1, 2], "json_schema must be a JSON object"),
    ],
)
def test_an_invalid_schema_is_refused_with_the_place(schema: Any, message: str) -> None:
    with pytest.raises(ConfigError, match="^" + message.replace("$", r"\$").replace(".", r"\.")):
        GenerationSettings(json_schema=json.dumps(schema))


# Bounds, checked before anything parses a schema recursively, and references kept within the schema.

REFS = {
    "$defs": {
        "label": {"enum": ["good", "bad"]},
        "node": {
            "type": "object",
            "properties": {"next": {"$ref": "#/$defs/node"}},
            "additionalProperties": False,
        },
    },
    "type": "object",
    "properties": {"label": {"$ref": "#/$defs/label"}, "chain": {"$ref": "#/$defs/node"}},
    "required": ["label"],
}


def test_local_refs_resolve_within_the_schema() -> None:
    schema = JsonSchema.from_text(json.dumps(REFS))
    assert schema.parse('{"label": "good", "chain": {"next": {"next": {}}}}')["label"] == "good"
    with pytest.raises(OutputError, match=r"^schema: \$\.label: 'great' is not one of"):
        schema.parse('{"label": "great"}')
    with pytest.raises(OutputError, match=r"^schema: \$\.chain\.next: Additional properties"):
        schema.parse('{"label": "bad", "chain": {"next": {"other": 1}}}')


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"allOf": ' * 5000 + "{}" + "}" * 5000,
            "json_schema nests 5001 levels of objects and arrays, more",
        ),
        ("[" * 65 + "]" * 65, "json_schema nests 65 levels of objects and arrays, more than the 64 allowed"),
        ('{"$ref": "#"}', "json_schema refers to itself without end: a $ref loop"),
        ('{"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}', "json_schema refers to itself"),
        (
            '{"properties": {"a": {"$ref": "#/$defs/nope"}}}',
            "json_schema has a $ref that does not resolve within the schema: '#/$defs/nope'",
        ),
        (
            '{"$ref": "https://example.com/s.json"}',
            "json_schema has a $ref that does not resolve within the schema: 'https://",
        ),
        (
            '{"$ref": "file:///etc/passwd"}',
            "json_schema has a $ref that does not resolve within the schema: 'file:///etc",
        ),
        ('{"$ref": {"block_document_id": "x"}}', "json_schema is not a valid JSON Schema: $.$ref: {'block"),
    ],
    ids=[
        "5000 deep",
        "65 deep",
        "loop to the root",
        "loop in $defs",
        "missing",
        "url",
        "file",
        "block reference",
    ],
)
def test_a_schema_out_of_bounds_is_one_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        JsonSchema.from_text(text)
    said = str(caught.value)
    assert said.startswith(message) and "\n" not in said and len(said) < 400, said


def test_a_schema_over_1_mib_is_refused_naming_its_size() -> None:
    text = json.dumps({"description": "x" * MAX_SCHEMA_BYTES})
    with pytest.raises(ConfigError, match=f"^json_schema is {len(text):,} bytes of JSON, more than the "):
        JsonSchema.from_text(text)
    JsonSchema.from_text(json.dumps({"description": "x" * (MAX_SCHEMA_BYTES - 100)}))


def test_64_levels_are_allowed_and_strings_do_not_count() -> None:
    inner = '{"const": "[[[[{{{{", "$defs": {}}'  # 2 levels; the brackets in the string are text
    deep = '{"not": ' * 62 + inner + "}" * 62  # 64 levels; an even number of nots is the const itself
    assert JsonSchema.from_text(deep).parse('"[[[[{{{{"') == "[[[[{{{{"


def test_an_output_nested_too_deep_is_a_dead_letter_not_a_crash() -> None:
    with pytest.raises(OutputError, match=r"^not JSON: nested 5000 levels deep, more than 256"):
        JsonSchema(True).parse("[" * 5000 + "]" * 5000)


def test_the_schema_text_is_canonical() -> None:
    spaced = json.dumps(SCHEMA, indent=4)
    packed = json.dumps(dict(reversed(list(SCHEMA.items()))), separators=(",", ":"))
    assert GenerationSettings(json_schema=spaced) == GenerationSettings(json_schema=packed)


# The generator.


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"))


def _spec(lm: Path, **settings: Any) -> HFCausalSpec:
    given = {"chat": "off", "max_new_tokens": 90, "json_schema": json.dumps(SCHEMA), **settings}
    return HFCausalSpec(lm, generation=GenerationSettings(**given))


def _run(spec: HFCausalSpec, texts: Sequence[str] = TEXTS, max_tokens: int = 4000) -> list[RowResult]:
    engine = Engine(spec.load(CPU), EngineConfig(max_tokens=max_tokens, precision="fp32"))
    return list(engine.run(enumerate(texts)))


def test_a_schema_adds_the_parsed_column_and_changes_the_version(lm: Path) -> None:
    plain = HFCausalSpec(lm, generation=GenerationSettings(chat="off", max_new_tokens=40)).describe()
    constrained, free = _spec(lm).describe(), _spec(lm, constrained=False).describe()
    assert [o.name for o in constrained.outputs] == [*(o.name for o in plain.outputs), "parsed"]
    assert constrained.outputs[-1].kind == "json"
    other = _spec(lm, json_schema=json.dumps({**SCHEMA, "required": ["label"]})).describe()
    assert len({plain.version, constrained.version, free.version, other.version}) == 4


def test_unconstrained_noise_becomes_dead_letters_saying_why(lm: Path) -> None:
    results = _run(_spec(lm, constrained=False))
    assert results and not any(r.ok for r in results)
    for result in results:
        assert isinstance(result.error, OutputError) and result.values is None
        assert str(result.error).startswith(("not JSON: ", "schema: ")), result.error


def test_constrained_decoding_gives_valid_json_that_stops_at_the_closing_brace(lm: Path) -> None:
    results = _run(_spec(lm))
    assert all(r.ok for r in results), [str(r.error) for r in results if not r.ok]
    for result in results:
        values = dict(result.values or {})
        assert values["finish_reason"] == "stop"
        assert values["generated_text"].endswith("}")
        assert values["parsed"] == json.loads(values["generated_text"])
        JsonSchema(SCHEMA).parse(values["generated_text"])


@pytest.mark.parametrize("sampling", [{}, {"temperature": 1.5, "seed": 7}], ids=["greedy", "sampled"])
def test_a_rows_constrained_output_does_not_depend_on_its_batch(
    lm: Path, sampling: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _spec(lm, **sampling)
    together = [r.values for r in _run(spec)]
    alone = [r.values for text in TEXTS for r in _run(spec, [text])]
    small = [r.values for r in _run(spec, max_tokens=120)]  # one or two rows a batch
    monkeypatch.setattr(HFGenerator, "KV_BUDGET", {"cpu": 250})  # two rows decode, the rest join
    joined = [r.values for r in _run(spec)]
    assert together == alone == small == joined


def test_constrained_decoding_without_xgrammar_names_the_extra(
    lm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "xgrammar", None)  # import xgrammar now raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'shardwise\[structured\]'.*--unconstrained"):
        _spec(lm).describe()
    assert _spec(lm, constrained=False).describe().outputs[-1].name == "parsed"
