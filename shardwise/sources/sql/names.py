"""A source table as the operator names it: ``name`` or ``schema.name``, split by its grammar.

``--table`` takes one name or two joined by a ``.``, in the notation of SQL
(PostgreSQL's): each part is either written as it is (no ``.`` and no ``"``
in it) or double-quoted, with ``""`` standing for a ``"`` inside, so a name
that holds a dot is written ``app."my.table"``. Nothing is case-folded: a
part names exactly the schema or table the database reports (an unquoted
``Docs`` is the table ``Docs``, as it always was here), and
:mod:`shardwise.sources.sql.schema` then checks both against the reflected
schema before any SQL names them, where SQLAlchemy quotes them.

A schema belongs to PostgreSQL: a SQLite database file has one namespace
(``main``; attached databases are not read), so a SQLite source refuses a
``schema.name``, naming the table alone as the fix. Three parts or more
(``db.schema.name``) are refused too: the database is the URL's.
"""

from __future__ import annotations

from shardwise.errors import ConfigError, SourceError

__all__ = ["split_table_name", "table_reference"]


def split_table_name(text: str) -> tuple[str | None, str]:
    """``text`` as (schema or None, table); a :class:`SourceError` (a bad identifier) when it is neither."""
    parts = _parts(text)
    if len(parts) > 2:
        raise _refused(
            text,
            f"has {len(parts)} parts",
            "give NAME or SCHEMA.NAME; the database is the one the URL names",
        )
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


def table_reference(text: str, schema: str | None, dialect: str) -> tuple[str | None, str]:
    """The schema and table a source reads: ``text``'s own schema, if it names one, else ``schema``.

    ``dialect`` is SQLAlchemy's name for the database; SQLite refuses a schema in ``text``.
    """
    named, table = split_table_name(text)
    if named is None:
        return schema, table
    if dialect == "sqlite":
        raise SourceError(
            f"table {text!r} names a schema ({named!r}), and a SQLite source reads the one database file "
            f"its URL names, which has no schemas; give the table alone: --table {_shown(table)}"
        )
    if schema is not None and schema != named:
        raise ConfigError(
            f"table {text!r} names schema {named!r} and schema={schema!r} is given too; name the schema once"
        )
    return named, table


def _parts(text: str) -> list[str]:
    parts: list[str] = []
    i = 0
    while True:
        name, i = _quoted(text, i) if text.startswith('"', i) else _plain(text, i)
        if not name:
            raise _refused(text, "has an empty name", 'write each part, e.g. app.docs or app."my.docs"')
        parts.append(name)
        if i == len(text):
            return parts
        if text[i] != ".":
            raise _refused(text, "has text after a closing quote", "join the parts with '.' only")
        i += 1


def _plain(text: str, start: int) -> tuple[str, int]:
    end = text.find(".", start)
    end = len(text) if end < 0 else end
    name = text[start:end]
    if '"' in name:
        raise _refused(text, "has a '\"' inside a name", 'double-quote the whole name, writing " as ""')
    return name, end


def _quoted(text: str, start: int) -> tuple[str, int]:
    pieces, i = [], start + 1
    while True:
        close = text.find('"', i)
        if close < 0:
            raise _refused(text, "has an unclosed '\"'", "close the quoted name")
        pieces.append(text[i:close])
        if not text.startswith('"', close + 1):
            return "".join(pieces), close + 1
        pieces.append('"')  # "" inside quotes is one "
        i = close + 2


def _shown(name: str) -> str:
    """``name`` as --table takes it: quoted when it holds a dot or a quote."""
    return f'"{name.replace(chr(34), chr(34) * 2)}"' if "." in name or '"' in name else name


def _refused(text: str, why: str, fix: str) -> SourceError:
    return SourceError(f"table {text!r} is not NAME or SCHEMA.NAME: it {why}; {fix}")
