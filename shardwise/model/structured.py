"""Structured output: a generator's text checked against a JSON Schema.

With a schema (``--json-schema FILE``) every completion is parsed and
validated here, constrained decoding or not: a grammar bounds the tokens, but
only the decoded text tells whether it is JSON that strict parsers and
PostgreSQL's ``jsonb`` accept. A completion that fails becomes the row's dead
letter, with the reason as its message:

* ``not JSON: <parser message>: <the start of the output>`` for text that is
  not one strict JSON value: trailing text, ``NaN``/``Infinity``, raw control
  characters in strings, a NUL (``\\u0000``) or a lone UTF-16 surrogate (both
  valid escapes that ``jsonb`` rejects), or output cut at ``max_new_tokens``;
* ``schema: <path>: <message>`` for JSON that breaks the schema, at the
  deepest failing place (``$`` is the document, ``$.items[0].name`` a part).

A valid completion's value is the row's ``parsed`` output (``jsonb`` in
PostgreSQL, JSON text elsewhere). Validation follows the schema's own
``$schema`` draft (2020-12 when it names none); ``format`` is not asserted.
Local references (``"$ref": "#/$defs/name"``) resolve within the schema;
nothing is fetched from elsewhere.

A schema is bounded before anything parses it recursively: at most
:data:`MAX_SCHEMA_BYTES` of JSON text, nested at most :data:`MAX_SCHEMA_DEPTH`
levels (counted over the text, without recursion), and a ``$ref`` loop that
never reaches a schema (``{"$ref": "#"}``) is refused. Each is a
:class:`~shardwise.errors.ConfigError` in one line, before anything runs: a
schema nested 5,000 deep once printed a 59-line ``RecursionError``. An
output nested deeper than :data:`MAX_OUTPUT_DEPTH` is a dead letter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Any

from shardwise.errors import ConfigError, OutputError
from shardwise.model.schema_empty import empty_reason

__all__ = ["MAX_OUTPUT_DEPTH", "MAX_SCHEMA_BYTES", "MAX_SCHEMA_DEPTH", "JsonSchema", "json_depth"]

MAX_SCHEMA_BYTES = 1 << 20
"""The most JSON text a schema may take (1 MiB): real schemas take kilobytes."""
MAX_SCHEMA_DEPTH = 64
"""The most levels of objects and arrays a schema may nest. A schema is about twice as deep as the
data it describes (``properties``, then a name, per level); deeper shapes are written with
``$defs`` and ``$ref``, which cost no depth."""
MAX_OUTPUT_DEPTH = 256
"""The most levels an output may nest before it is a dead letter instead of parsed (Python's parser
would fail near 1,000 with a ``RecursionError``)."""
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')

_SHOWN = 80
"""Characters of a failing output quoted in its dead letter: enough to recognise it."""


class JsonSchema:
    """A checked JSON Schema: its canonical text (for the model version) and its validator."""

    def __init__(self, schema: Mapping[str, Any] | bool) -> None:
        _check_depth(_value_depth(schema), "json_schema")
        self.schema = schema
        self.text = json.dumps(schema, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
        self._validator  # noqa: B018 - checks the schema itself now, before anything runs
        self._check_not_empty()

    @classmethod
    def from_text(cls, text: str, where: str = "json_schema") -> JsonSchema:
        """Parse a schema given as JSON text; a :class:`ConfigError` naming ``where`` if it is not one.

        Its size and depth are checked on the text first, so nothing recursive sees a hostile one.
        """
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_SCHEMA_BYTES:
            raise ConfigError(
                f"{where} is {size:,} bytes of JSON, more than the {MAX_SCHEMA_BYTES:,} a schema may take; "
                "give a smaller schema (repeated parts can be written once under $defs and used by $ref)"
            )
        _check_depth(json_depth(text), where)
        try:
            schema = json.loads(text, parse_constant=_no_constant)
        except ValueError as exc:
            raise ConfigError(f"{where} is not JSON ({exc}); give a JSON Schema document") from exc
        if not isinstance(schema, dict | bool):
            raise _not_a_schema(schema, where)
        return cls(schema)

    @cached_property
    def _validator(self) -> Any:
        from jsonschema import SchemaError
        from jsonschema.validators import Draft202012Validator, validator_for
        from referencing.exceptions import Unresolvable

        if not isinstance(self.schema, (Mapping, bool)):
            raise _not_a_schema(self.schema)
        cls = validator_for(self.schema, default=Draft202012Validator)
        try:
            cls.check_schema(self.schema)
        except SchemaError as exc:
            raise ConfigError(
                f"json_schema is not a valid JSON Schema: {_path(exc.absolute_path)}: {_short(exc.message)}; "
                "fix the schema"
            ) from exc
        _check_local_refs(self.schema)
        validator = cls(self.schema)
        try:  # a $ref loop that never reaches a schema ({"$ref": "#"}) recurses on any document
            documents: tuple[Any, ...] = (None, {}, [])
            for document in documents:
                validator.is_valid(document)
        except RecursionError:
            raise ConfigError(
                "json_schema refers to itself without end: a $ref loop that never reaches a schema (such "
                'as {"$ref": "#"}); fix the schema so each $ref leads to a type or keywords'
            ) from None
        except Unresolvable as exc:
            raise _unresolvable(exc) from None
        return validator

    def _check_not_empty(self) -> None:
        """Refuse a schema that admits no value (see :mod:`shardwise.model.schema_empty`): every row
        would fail."""
        validator = self._validator

        def valid(part: Mapping[str, Any], value: Any) -> bool:
            try:
                return bool(validator.evolve(schema=part).is_valid(value))
            except Exception:  # a part the validator cannot check alone: taken to admit the value
                return True

        reason = empty_reason(self.schema, valid)
        if reason is not None:
            raise ConfigError(
                f"json_schema admits no value, so every row would fail: {_short(reason, 240)}; fix the "
                "schema so that some JSON value satisfies it"
            )

    def parse(self, text: str) -> Any:
        """The JSON value of ``text`` if valid under the schema; else an :class:`OutputError` saying why."""
        depth = json_depth(text)
        if depth > MAX_OUTPUT_DEPTH:
            raise OutputError(
                f"not JSON: nested {depth} levels deep, more than {MAX_OUTPUT_DEPTH}: {_shown(text)}"
            )
        try:
            value = json.loads(text, parse_constant=_no_constant)
            _check_strings(value)
        except ValueError as exc:
            raise OutputError(f"not JSON: {exc}: {_shown(text)}") from None
        from referencing.exceptions import Unresolvable

        try:
            errors = list(self._validator.iter_errors(value))
        except RecursionError:
            raise OutputError("schema: $: checking it did not end (the schema's $ref loops on it)") from None
        except Unresolvable as exc:  # a reference below an $id, which the check before the run skips
            raise OutputError(f"schema: {_unresolvable(exc)}") from None
        if errors:
            from jsonschema.exceptions import best_match

            worst = best_match(errors)
            raise OutputError(f"schema: {_path(worst.absolute_path)}: {worst.message}")
        return value


def json_depth(text: str) -> int:
    """How many levels of objects and arrays the JSON ``text`` nests, counted without recursion.

    Brackets inside strings do not count; text that is not JSON gets a count all the same (the
    parser refuses it afterwards), so this only bounds what the parser will be given.
    """
    depth = deepest = 0
    for found in _STRING_OR_BRACKET.finditer(text):
        token = found.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def _value_depth(value: Any) -> int:
    """How many levels of dicts and lists ``value`` nests, counted without recursion."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, Mapping):
            todo += [(v, depth + 1) for v in item.values()]
        elif isinstance(item, list | tuple):
            todo += [(v, depth + 1) for v in item]
        else:
            deepest = max(deepest, depth)
            continue
        deepest = max(deepest, depth + 1)
    return deepest


def _check_local_refs(schema: Mapping[str, Any] | bool) -> None:
    """Refuse a ``$ref`` that does not resolve within the schema, before any document is checked.

    References are resolved only within the schema itself (``#``, ``#/$defs/name``, an ``$id`` it
    declares): nothing is fetched from a URL or a file. A schema that declares ``$id`` below its root
    changes what a reference is relative to, so its references are left to the validator, which
    refuses an unresolvable one as it meets it (a dead letter).
    """
    from referencing import Registry
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012, specification_with

    if not isinstance(schema, Mapping):
        return
    refs, nested_ids, todo = [], False, [(schema, True)]
    while todo:
        item, root = todo.pop()
        if isinstance(item, Mapping):
            if isinstance(item.get("$ref"), str):
                refs.append(item["$ref"])
            nested_ids = nested_ids or (not root and isinstance(item.get("$id"), str))
            todo += [(v, False) for v in item.values()]
        elif isinstance(item, list):
            todo += [(v, False) for v in item]
    if nested_ids or not refs:
        return
    dialect = schema.get("$schema")
    specification = (
        specification_with(dialect, default=DRAFT202012) if isinstance(dialect, str) else DRAFT202012
    )
    resolver = Registry().resolver_with_root(specification.create_resource(schema))
    for ref in refs:
        try:
            resolver.lookup(ref)
        except Unresolvable as exc:
            raise _unresolvable(exc, ref) from None


def _unresolvable(exc: Exception, ref: str | None = None) -> ConfigError:
    ref = ref or getattr(exc, "ref", None) or str(exc)
    return ConfigError(
        f"json_schema has a $ref that does not resolve within the schema: {_short(repr(ref), 120)}; only "
        'references into the schema itself are followed (such as "#/$defs/name"): define the part under '
        "$defs, or fix the reference"
    )


def _not_a_schema(value: Any, where: str = "json_schema") -> ConfigError:
    return ConfigError(
        f"{where} must be a JSON object (or true/false); got a {type(value).__name__}: give a schema such as "
        '{"type": "object", "properties": {...}}'
    )


def _check_depth(depth: int, where: str) -> None:
    if depth > MAX_SCHEMA_DEPTH:
        raise ConfigError(
            f"{where} nests {depth} levels of objects and arrays, more than the {MAX_SCHEMA_DEPTH} allowed; "
            "flatten it: define repeated or deep parts once under $defs and refer to them with $ref"
        )


def _short(message: str, limit: int = 200) -> str:
    """A message quoting part of a schema, cut to ``limit`` characters: one line stays readable."""
    line = " ".join(message.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _check_strings(value: Any) -> None:
    """Refuse what strict JSON parsers and ``jsonb`` refuse though Python's parser takes it."""
    for text in _strings(value):
        if "\x00" in text:
            raise ValueError("a string holds NUL (\\u0000), which jsonb cannot store")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a string holds a lone UTF-16 surrogate escape") from None


def _strings(value: Any) -> Iterator[str]:
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            yield from item
            todo += item.values()
        elif isinstance(item, list):
            todo += item


def _path(parts: Any) -> str:
    """A place in a document, JSONPath-style: ``$``, ``$.items[0].name``."""
    path = "$"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _shown(text: str) -> str:
    """The start of a failing output, quoted, for its dead letter."""
    return repr(text[:_SHOWN]) + ("..." if len(text) > _SHOWN else "")
