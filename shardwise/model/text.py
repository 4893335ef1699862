"""Checks one input value before it is tokenised, and says why an unusable one cannot be scored.

Error messages quote at most :data:`PREVIEW_CHARS` characters of a value and
only its type and size beyond that: dead letters are stored, and a message
that copied a whole row (a JSON document, a long text) would make the
dead-letter table a second copy of data that may be sensitive.
"""

from __future__ import annotations

from collections.abc import Sequence, Sized

from shardwise.errors import InputError
from shardwise.model import TextInput

__all__ = [
    "PREVIEW_CHARS",
    "Inputs",
    "UndecodableText",
    "coerce_input",
    "coerce_text",
    "preview",
    "prompt_fields",
    "row_value",
]

PREVIEW_CHARS = 40
"""The most characters of a row's value (its ``repr``) that an error message quotes."""


class UndecodableText(bytes):
    """The stored bytes of a text value that are not valid UTF-8, with its row's key and where it was read.

    A source hands one over instead of failing the whole read, so that only
    this row becomes a dead letter, with a message naming the key and the
    file. It is ``bytes`` so that its input fingerprint is that of the stored
    bytes, as for a binary column, and a redrive sees whether it changed.
    """

    key: object
    where: str

    def __new__(cls, raw: bytes, key: object, where: str) -> UndecodableText:
        self = super().__new__(cls, raw)
        self.key, self.where = key, where
        return self

    def __reduce__(self) -> tuple[type[UndecodableText], tuple[bytes, object, str]]:
        return UndecodableText, (bytes(self), self.key, self.where)


class Inputs(tuple[object, ...]):
    """A row's values of several input columns as the source read them, text column first, with names.

    Sources give one when a run reads more than the text column: a text pair
    column (cross-encoders and other two-text models, whose pair
    :func:`coerce_input` checks), or the other columns a generator's prompt
    names (``{title}``), which fill the prompt by name.
    """

    names: tuple[str, ...]

    def __new__(cls, names: Sequence[str], values: Sequence[object]) -> Inputs:
        if len(names) != len(values) or len(values) < 2:
            raise ValueError(f"Inputs needs 2+ values, one per name; got {names!r} and {len(values)}")
        self = super().__new__(cls, values)
        self.names = tuple(names)
        return self

    @classmethod
    def pair(cls, text: object, pair: object) -> Inputs:
        """A text and its pair, as a source reading a text pair column gives them."""
        return cls(("text", "text pair"), (text, pair))

    def __reduce__(self) -> tuple[type[Inputs], tuple[tuple[str, ...], tuple[object, ...]]]:
        return Inputs, (self.names, tuple(self))

    def by_name(self) -> dict[str, object]:
        return dict(zip(self.names, self, strict=True))


def row_value(values: Sequence[object], names: Sequence[str]) -> object:
    """A row's value as a source gives it, from its input columns ``names``: the text, or :class:`Inputs`."""
    if len(values) == 1:
        return values[0]
    return Inputs(names, values)


def coerce_input(value: object) -> TextInput:
    """A row's value as the model's input: :func:`coerce_text` of a text, or of both members of a pair.

    A pair with a null, empty or non-text member cannot be scored: its row
    becomes a dead letter whose message says which member is wrong.
    """
    if isinstance(value, Inputs):
        if len(value) != 2:
            raise InputError(
                f"a text model takes a text or a text and its pair; the row gives {len(value)} columns "
                f"({', '.join(value.names)})"
            )
        return coerce_text(value[0]), coerce_text(value[1], "text pair")
    return coerce_text(value)


def prompt_fields(names: Sequence[str], value: object) -> dict[str, str]:
    """A prompt template's placeholders ``names`` filled from a row: by column name from :class:`Inputs`,
    or all with a single text. A null, empty or non-text value is a dead letter naming its column; so is a
    placeholder the row has no column for. Every generator (local or remote) fills its prompts so."""
    if not isinstance(value, Inputs):
        return dict.fromkeys(names, coerce_text(value))
    given = value.by_name()
    missing = [name for name in names if name not in given]
    if missing:
        raise InputError(f"the row has no column {', '.join(missing)} for the prompt's placeholders")
    return {name: coerce_text(given[name], f"column {name!r}") for name in names}


def coerce_text(value: object, what: str = "text") -> str:
    """Return ``value`` as text, or raise :class:`InputError` saying why it cannot be scored.

    Bytes are accepted if they are valid UTF-8, since some drivers hand back
    ``bytea`` or binary Parquet columns. Everything that is not text is rejected
    rather than ``str()``-ed: scoring ``"None"`` or ``"42"`` would silently give
    a meaningless result. ``what`` names the value in messages (the text, or
    its pair).
    """
    if value is None:
        raise InputError(f"{what} is null; the row has no {what} to score")
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = _decode(value, what)
    if not isinstance(value, str):
        raise InputError(
            f"{what} must be a string, got {type(value).__name__} {preview(value)}; "
            f"point the {what} column at a string column"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(
            f"{what} holds an unpaired surrogate at character {exc.start}, so it is not valid "
            "Unicode; fix the encoding where the row was written"
        ) from exc
    if not value.strip():
        raise InputError(f"{what} is empty or only whitespace ({preview(value)}); nothing to score")
    return value


def _decode(value: bytes | bytearray | memoryview, what: str) -> str:
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        if isinstance(value, UndecodableText):
            raise InputError(
                f"{what} of key {preview(value.key)} in {value.where} is not valid UTF-8 ({exc.reason} "
                f"at byte {exc.start}) although the column is declared as text; fix the program that "
                "wrote the file, rewrite it, then redrive the run"
            ) from exc
        raise InputError(
            f"{what} is not valid UTF-8 ({exc.reason} at byte {exc.start}); store the column as UTF-8 text"
        ) from exc


def preview(value: object, limit: int = PREVIEW_CHARS) -> str:
    """``repr(value)`` if it has at most ``limit`` characters; else its first ``limit``, then type and size.

    For example ``'aaaaaaaa... (str of 5000 characters)``: enough to recognise
    the value, never a copy of it.
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({_size(value, len(text))})"


def _size(value: object, repr_chars: int) -> str:
    name = type(value).__name__
    if isinstance(value, str):
        return f"{name} of {len(value)} characters"
    if isinstance(value, (bytes, bytearray)):
        return f"{name} of {len(value)} bytes"
    if isinstance(value, Sized):
        return f"{name} of {len(value)} items"
    return f"{name}, {repr_chars} characters as repr"
