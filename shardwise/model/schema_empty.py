"""Whether a JSON Schema admits no value at all: found while planning, not when every row has failed.

A generator held to such a schema (``{"type": "string", "minLength": 5,
"maxLength": 2}``, ``{"enum": []}``, ``false``) can only write dead letters:
constrained decoding has no token to pick, and validation refuses whatever is
written. :func:`empty_reason` finds the common ways a schema contradicts
itself, each a proof that no value fits, and names the place and keywords:

* ``false``, ``{"not": {}}`` (or ``not: true``), an empty ``enum``, or an
  ``enum``/``const`` none of whose values passes the rest of its schema;
* bounds that cross, for every type the schema allows: ``minLength`` above
  ``maxLength``, a ``minimum`` above the ``maximum`` (or no integer between
  them for ``integer``), ``minItems`` above ``maxItems``, ``minProperties``
  above ``maxProperties`` or below the ``required`` count, ``minContains``
  above ``maxContains``;
* a part every value of a type needs that admits nothing: a required
  property whose schema is empty, a required property that
  ``additionalProperties: false`` (or an empty schema) forbids, the items or
  ``contains`` of an array that must have some, each of ``allOf``, or every
  branch of ``anyOf``/``oneOf``;
* ``allOf`` branches whose types or simple bounds have nothing in common;
* a local ``$ref`` to any of these (a reference loop is taken to admit values).

It is sound, not complete: whether a JSON Schema admits a value is not
decidable in general (patterns, ``multipleOf``, ``oneOf``'s "exactly one",
``not`` of a non-trivial schema, ``dependentSchemas``...), so a schema it
finds nothing wrong with may still be empty, and rows then fail one by one
as before. It never refuses a schema some value satisfies.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["empty_reason"]

_KINDS = frozenset({"null", "boolean", "object", "array", "string", "integer", "fraction"})
_TYPE_KINDS = {
    "null": {"null"},
    "boolean": {"boolean"},
    "object": {"object"},
    "array": {"array"},
    "string": {"string"},
    "integer": {"integer"},
    "number": {"integer", "fraction"},
}
_LOWER = ("minLength", "minItems", "minProperties", "minContains", "minimum", "exclusiveMinimum")
_UPPER = ("maxLength", "maxItems", "maxProperties", "maxContains", "maximum", "exclusiveMaximum")

Valid = Callable[[Mapping[str, Any], Any], bool]
"""Whether a value passes a part of the schema (the part's local references resolved in the whole)."""


def empty_reason(schema: Mapping[str, Any] | bool, valid: Valid) -> str | None:
    """Why no value satisfies ``schema`` (the place, as a JSON pointer, and the keywords), or None when
    none of the contradictions above is found. ``valid`` checks a value against a part of it."""
    return _Finder(schema, valid).empty(schema, "#", frozenset())


class _Finder:
    def __init__(self, root: Mapping[str, Any] | bool, valid: Valid) -> None:
        self.root, self.valid = root, valid

    def empty(self, node: Any, at: str, refs: frozenset[str]) -> str | None:
        if node is False:
            return f"at {at}, the schema false admits no value"
        if not isinstance(node, Mapping):
            return None
        return (
            self._ref(node, at, refs)
            or _universal_not(node, at)
            or self._values(node, at)
            or self._branches(node, at, refs)
            or self._kinds(node, at, refs)
        )

    def _ref(self, node: Mapping[str, Any], at: str, refs: frozenset[str]) -> str | None:
        ref = node.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#") or ref in refs:
            return None  # a loop, or a reference this check does not follow: taken to admit values
        target = _pointer(self.root, ref)
        return None if target is None else self.empty(target, ref, refs | {ref})

    def _values(self, node: Mapping[str, Any], at: str) -> str | None:
        if "const" in node and not self.valid(node, node["const"]):
            return f"at {at}, const {_shown(node['const'])} breaks the other keywords beside it"
        enum = node.get("enum")
        if isinstance(enum, list):
            if not enum:
                return f"at {at}, enum is empty"
            if not any(self.valid(node, value) for value in enum):
                return f"at {at}, no value of enum {_shown(enum)} passes the other keywords beside it"
        return None

    def _branches(self, node: Mapping[str, Any], at: str, refs: frozenset[str]) -> str | None:
        for i, part in enumerate(node.get("allOf") or ()):
            found = self.empty(part, f"{at}/allOf/{i}", refs)
            if found:
                return found
        for word in ("anyOf", "oneOf"):
            parts = node.get(word)
            if isinstance(parts, list) and parts:
                reasons = [self.empty(p, f"{at}/{word}/{i}", refs) for i, p in enumerate(parts)]
                if all(reasons):
                    return f"at {at}, every {word} branch admits no value (first: {reasons[0]})"
        return None

    def _kinds(self, node: Mapping[str, Any], at: str, refs: frozenset[str]) -> str | None:
        """Each type the node (with its allOf branches) allows is empty under the bounds they share."""
        merged = _merged([node, *[p for p in node.get("allOf") or () if isinstance(p, Mapping)]])
        kinds = merged["kinds"]
        if not kinds:
            return f"at {at}, its types and its allOf branches' types have no value in common"
        why = {kind: self._kind_empty(kind, merged, node, at, refs) for kind in sorted(kinds)}
        if all(why.values()):
            if why.get("fraction"):
                why.pop("integer", None)  # no number at all: say so once
            return "; ".join(dict.fromkeys(str(reason) for reason in why.values()))
        return None

    def _kind_empty(
        self, kind: str, merged: dict[str, Any], node: Mapping[str, Any], at: str, refs: frozenset[str]
    ) -> str | None:
        if kind == "string":
            return _crossed(merged, "minLength", "maxLength", at)
        if kind in ("integer", "fraction"):
            return _numbers_empty(merged, at, integer=kind == "integer")
        if kind == "array":
            return _crossed(merged, "minItems", "maxItems", at) or self._array(node, merged, at, refs)
        if kind == "object":
            return _crossed(merged, "minProperties", "maxProperties", at) or self._object(
                node, merged, at, refs
            )
        return None

    def _array(
        self, node: Mapping[str, Any], merged: dict[str, Any], at: str, refs: frozenset[str]
    ) -> str | None:
        least = merged.get("minItems", 0)
        given = node.get("prefixItems")
        prefix: list[Any] = given if isinstance(given, list) else []
        for i, part in enumerate(prefix[: int(least)]):
            found = self.empty(part, f"{at}/prefixItems/{i}", refs)
            if found:
                return f"{found}, and minItems {least} needs that item"
        items = node.get("items")
        if least > len(prefix) and items is not None:
            found = self.empty(items, f"{at}/items", refs)
            if found:
                return f"{found}, and minItems {least} needs such an item"
        if "contains" in node and merged.get("minContains", 1) >= 1:
            found = self.empty(node["contains"], f"{at}/contains", refs)
            if found:
                return f"{found}, and contains needs such an item"
        return _crossed(merged, "minContains", "maxContains", at)

    def _object(
        self, node: Mapping[str, Any], merged: dict[str, Any], at: str, refs: frozenset[str]
    ) -> str | None:
        required = merged["required"]
        most = merged.get("maxProperties")
        if most is not None and len(required) > most:
            return f"at {at}, {len(required)} properties are required and maxProperties is {most:g}"
        given = node.get("properties")
        properties: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        patterns = [p for p in node.get("patternProperties") or () if isinstance(p, str)]
        extra = node.get("additionalProperties", True)
        for name in required:
            if name in properties:
                found = self.empty(properties[name], f"{at}/properties/{name}", refs)
                if found:
                    return f"{found}, and property {name!r} is required"
            elif not any(_matches(p, name) for p in patterns) and self.empty(extra, at, refs):
                return f"at {at}, property {name!r} is required and additionalProperties forbids it"
        return None


def _universal_not(node: Mapping[str, Any], at: str) -> str | None:
    refused = node.get("not", None)
    if refused is True or (isinstance(refused, Mapping) and not refused):
        return f"at {at}, not {_shown(refused)} refuses every value"
    return None


def _merged(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The node's and its allOf branches' types (intersected), bounds (the tightest) and required names."""
    merged: dict[str, Any] = {"kinds": set(_KINDS), "required": set()}
    for part in parts:
        declared = part.get("type")
        if isinstance(declared, str | list):
            names = [declared] if isinstance(declared, str) else declared
            merged["kinds"] &= set().union(*(_TYPE_KINDS.get(n, set()) for n in names if isinstance(n, str)))
        required = part.get("required")
        if isinstance(required, list):
            merged["required"] |= {name for name in required if isinstance(name, str)}
        for word in _LOWER + _UPPER:
            value = part.get(word)
            if isinstance(value, int | float) and not isinstance(value, bool):
                keep = max if word in _LOWER else min
                merged[word] = keep(merged.get(word, value), value)
    return merged


def _crossed(merged: Mapping[str, Any], low: str, high: str, at: str) -> str | None:
    if low in merged and high in merged and merged[low] > merged[high]:
        return f"at {at}, {low} {merged[low]:g} is above {high} {merged[high]:g}"
    return None


def _numbers_empty(merged: Mapping[str, Any], at: str, *, integer: bool) -> str | None:
    """No number (no integer, for ``integer``) lies within the bounds."""
    low, low_open = _bound(merged, "minimum", "exclusiveMinimum", max)
    high, high_open = _bound(merged, "maximum", "exclusiveMaximum", min)
    if low is None or high is None:
        return None
    lower, upper = (
        ("exclusiveMinimum" if low_open else "minimum"),
        ("exclusiveMaximum" if high_open else "maximum"),
    )
    words = f"{lower} and {upper}"
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    shown = f"at {at}, no {'integer' if integer else 'number'} lies in {interval} ({words})"
    if integer:
        first = math.floor(low) + 1 if low_open else math.ceil(low)
        last = math.ceil(high) - 1 if high_open else math.floor(high)
        return shown if first > last else None
    return shown if low > high or (low == high and (low_open or high_open)) else None


def _bound(merged: Mapping[str, Any], closed: str, open_: str, tighter: Any) -> tuple[float | None, bool]:
    """The tighter of a closed and an open bound, and whether it is the open one (equal: the open one)."""
    if closed in merged and open_ in merged:
        chosen = tighter(merged[closed], merged[open_])
        return chosen, chosen == merged[open_]
    if open_ in merged:
        return merged[open_], True
    return merged.get(closed), False


def _pointer(root: Any, ref: str) -> Any:
    """The part of ``root`` a local reference (``#``, ``#/$defs/name``) names, or None."""
    node = root
    for raw in ref[1:].split("/")[1:] if ref != "#" else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _matches(pattern: str, name: str) -> bool:
    try:
        return re.search(pattern, name) is not None
    except re.error:
        return True  # a pattern Python cannot read: taken to match, so nothing is refused on it


def _shown(value: Any, limit: int = 60) -> str:
    import json

    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."
