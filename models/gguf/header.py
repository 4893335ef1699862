"""A GGUF file's metadata values, read straight from its header: the few keys Shardwise needs.

The ``gguf`` package's ``GGUFReader`` builds a numpy view for every item
of every array in the header before it answers anything: for SmolLM2's
49,152 tokens and 48,900 merges, 4 to 7 s on two busy CPU cores, at every
run (planning reads the header, and loading read it again for the BOS
rule). This reads the key-value section in order, as the format lays it out
(little-endian; GGUF versions 2 and 3), keeping the values of the keys
asked for and seeking past the rest, the arrays included: milliseconds.
String arrays asked for (the token list) come back as lists of str; other
arrays asked for, as lists of numbers. A file this reader does not follow
(another version, a big-endian file) is read by ``GGUFReader`` instead.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["header_values"]

_MAGIC = b"GGUF"
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


def header_values(path: Path, wanted: Callable[[str], bool]) -> dict[str, Any]:
    """The values of the keys of the file's header that ``wanted`` picks. Raises ValueError (or OSError) for a
    file that is no GGUF file or is cut short."""
    with open(path, "rb") as f:
        if f.read(4) != _MAGIC:
            raise ValueError("no GGUF magic number at the start of the file")
        (version,) = _unpack(f, "<I")
        if version not in (2, 3):
            return _with_reader(path, wanted)
        _tensors, count = _unpack(f, "<QQ")
        found: dict[str, Any] = {}
        for _ in range(count):
            key = _string(f)
            (kind,) = _unpack(f, "<I")
            if wanted(key):
                found[key] = _value(f, kind)
            else:
                _skip(f, kind)
        return found


def _unpack(f: BinaryIO, fmt: str) -> tuple[Any, ...]:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("the GGUF header is cut short")
    return struct.unpack(fmt, data)


def _string(f: BinaryIO) -> str:
    (length,) = _unpack(f, "<Q")
    data = f.read(length)
    if len(data) != length:
        raise ValueError("the GGUF header is cut short")
    return data.decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int) -> Any:
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        item, length = _unpack(f, "<IQ")
        if item == _STRING:
            return [_string(f) for _ in range(length)]
        if item in _SCALARS:
            return list(_unpack(f, f"<{length}{_SCALARS[item]}"))
        return [_value(f, item) for _ in range(length)]
    if kind in _SCALARS:
        return _unpack(f, "<" + _SCALARS[kind])[0]
    raise ValueError(f"unknown GGUF value type {kind}")


def _skip(f: BinaryIO, kind: int) -> None:
    if kind == _STRING:
        (length,) = _unpack(f, "<Q")
        f.seek(length, 1)
    elif kind == _ARRAY:
        item, length = _unpack(f, "<IQ")
        if item in _SCALARS:
            f.seek(length * struct.calcsize(_SCALARS[item]), 1)
        else:
            for _ in range(length):
                _skip(f, item)
    elif kind in _SCALARS:
        f.seek(struct.calcsize(_SCALARS[kind]), 1)
    else:
        raise ValueError(f"unknown GGUF value type {kind}")


def _with_reader(path: Path, wanted: Callable[[str], bool]) -> dict[str, Any]:
    """The same values through ``GGUFReader`` (slow, but it follows every layout it knows)."""
    from gguf import GGUFReader

    fields = GGUFReader(path, "r").fields
    return {key: field.contents() for key, field in fields.items() if wanted(key)}
