"""Checks one input value before it is tokenised."""

from __future__ import annotations

from shardwise.errors import InputError

__all__ = ["coerce_text"]


def coerce_text(value: object) -> str:
    """Return ``value`` as text, or raise :class:`InputError` saying why it cannot be scored.

    Bytes are accepted if they are valid UTF-8, since some drivers hand back
    ``bytea`` or binary Parquet columns. Everything that is not text is rejected
    rather than ``str()``-ed: scoring ``"None"`` or ``"42"`` would silently give
    a meaningless result.
    """
    if value is None:
        raise InputError("text is null; the row has no text to score")
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                f"text is not valid UTF-8 ({exc.reason} at byte {exc.start}); store the column as UTF-8 text"
            ) from exc
    if not isinstance(value, str):
        raise InputError(
            f"text must be a string, got {type(value).__name__} {_preview(value)}; "
            "point the text column at a string column"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(
            f"text holds an unpaired surrogate at character {exc.start}, so it is not valid "
            "Unicode; fix the encoding where the row was written"
        ) from exc
    if not value.strip():
        raise InputError(f"text is empty or only whitespace ({_preview(value)}); nothing to score")
    return value


def _preview(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
