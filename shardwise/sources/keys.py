"""Keys as the ledger stores them (text) turned back into a source's key type, for keyed reads.

``shardwise_errors`` stores every key as text, so that integer and text
sources share one table. A keyed read (a redrive of dead letters) gets those
texts back and must compare them with the key column in its own type: an
integer column never equals the text ``'42'`` on PostgreSQL, and Parquet's
``is_in`` compares typed values too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from shardwise.errors import ConfigError
from shardwise.sources.base import Key, KeyType

__all__ = ["KEY_CHUNK", "key_chunks", "parse_keys"]

KEY_CHUNK = 900
"""Keys per ``IN (...)`` list: under SQLite's historic limit of 999 bound parameters per statement."""


def _as_int(key: Key, where: str) -> int:
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    try:
        return int(key)
    except (TypeError, ValueError):
        raise ConfigError(
            f"key {key!r} is not an integer, but the key column of {where} holds integers; "
            "the keys belong to another source: use the source the keys came from"
        ) from None


def _as_str(key: Key, where: str) -> str:
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        raise ConfigError(f"key {key!r} of {where} must be an integer or text; got a {type(key).__name__}")
    return str(key)


def parse_keys(keys: Sequence[Key], kind: KeyType, where: str) -> list[Key]:
    """``keys`` in the key column's type (``kind``), without duplicates, in the order given.

    ``where`` names the source for the error message of a key that cannot be converted.
    """
    convert = _as_int if kind == "int" else _as_str
    return list(dict.fromkeys(convert(k, where) for k in keys))


def key_chunks(keys: Sequence[Key], size: int = KEY_CHUNK) -> Iterator[Sequence[Key]]:
    """``keys`` in consecutive runs of at most ``size``."""
    for start in range(0, len(keys), size):
        yield keys[start : start + size]
