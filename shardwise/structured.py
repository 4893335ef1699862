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
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Any

from shardwise.errors import ConfigError, OutputError

__all__ = ["JsonSchema"]

_SHOWN = 80
"""Characters of a failing output quoted in its dead letter: enough to recognise it."""


class JsonSchema:
    """A checked JSON Schema: its canonical text (for the model version) and its validator."""

    def __init__(self, schema: Mapping[str, Any] | bool) -> None:
        self.schema = schema
        self.text = json.dumps(schema, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
        self._validator  # noqa: B018 - checks the schema itself now, before anything runs

    @classmethod
    def from_text(cls, text: str, where: str = "json_schema") -> JsonSchema:
        """Parse a schema given as JSON text; a :class:`ConfigError` naming ``where`` if it is not one."""
        try:
            schema = json.loads(text, parse_constant=_no_constant)
        except ValueError as exc:
            raise ConfigError(f"{where} is not JSON ({exc}); give a JSON Schema document") from exc
        return cls(schema)

    @cached_property
    def _validator(self) -> Any:
        from jsonschema import SchemaError
        from jsonschema.validators import Draft202012Validator, validator_for

        if not isinstance(self.schema, (Mapping, bool)):
            raise ConfigError(
                f"json_schema must be a JSON object (or true/false); got a {type(self.schema).__name__}: "
                'give a schema such as {"type": "object", "properties": {...}}'
            )
        cls = validator_for(self.schema, default=Draft202012Validator)
        try:
            cls.check_schema(self.schema)
        except SchemaError as exc:
            raise ConfigError(
                f"json_schema is not a valid JSON Schema: {_path(exc.absolute_path)}: {exc.message}; fix the "
                "schema"
            ) from exc
        return cls(self.schema)

    def parse(self, text: str) -> Any:
        """The JSON value of ``text`` if valid under the schema; else an :class:`OutputError` saying why."""
        try:
            value = json.loads(text, parse_constant=_no_constant)
            _check_strings(value)
        except ValueError as exc:
            raise OutputError(f"not JSON: {exc}: {_shown(text)}") from None
        errors = list(self._validator.iter_errors(value))
        if errors:
            from jsonschema.exceptions import best_match

            worst = best_match(errors)
            raise OutputError(f"schema: {_path(worst.absolute_path)}: {worst.message}")
        return value


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
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _path(parts: Any) -> str:
    """A place in a document, JSONPath-style: ``$``, ``$.items[0].name``."""
    path = "$"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _shown(text: str) -> str:
    """The start of a failing output, quoted, for its dead letter."""
    return repr(text[:_SHOWN]) + ("..." if len(text) > _SHOWN else "")
