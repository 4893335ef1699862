"""How a settings field is given on the command line: :class:`Flag`, kept on the field itself.

A settings class (:class:`~shardwise.pipeline.spec.RunSettings`, a section of the flow's parameters)
declares each field once; its flag's name and metavar ride on it as ``Annotated`` metadata, which
pydantic keeps and leaves out of the form's JSON schema. The command line builds its options from the
fields, so a new setting is one field, not a field and a row in a table of flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Flag", "commands", "flag_name", "metavar"]


@dataclass(frozen=True)
class Flag:
    """A field's command-line option: ``name`` (default ``--`` and the field's name, ``_`` as ``-``),
    ``metavar`` (default the field's name in capitals), and the scoring ``commands`` that take it (all
    three by default; none: the field is set by no option)."""

    name: str | None = None
    metavar: str | None = None
    commands: tuple[str, ...] = ("run", "redrive", "plan")


def _flag(info: Any) -> Flag:
    return next((m for m in getattr(info, "metadata", ()) if isinstance(m, Flag)), Flag())


def flag_name(field: str, info: Any) -> str:
    """The option of the field ``field`` whose pydantic ``FieldInfo`` is ``info``."""
    return _flag(info).name or "--" + field.replace("_", "-")


def metavar(field: str, info: Any) -> str:
    """The metavar of the field ``field`` whose pydantic ``FieldInfo`` is ``info``."""
    return _flag(info).metavar or field.upper()


def commands(info: Any) -> tuple[str, ...]:
    """The scoring commands that take the field whose pydantic ``FieldInfo`` is ``info``."""
    return _flag(info).commands
