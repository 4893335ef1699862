"""Load the ``.sql`` files under ``sql/<dialect>/`` (or ``sql/common/``) by name.

SQL lives in files so it can be read, diffed and run by hand; code never
assembles it from f-strings. ``--`` comment lines are dropped on load, so a
comment may mention ``;`` or ``{placeholders}`` without changing the statement.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from pathlib import Path

import sqlalchemy as sa

from shardwise.errors import ConfigError

__all__ = ["SQL_DIR", "load_script", "load_sql", "query"]

SQL_DIR = Path(str(files("sql")))
"""The ``sql/`` folder (a package so it ships in wheels): one subfolder per SQLAlchemy dialect name."""

_DIALECTS = ("postgresql", "sqlite")


@cache
def load_sql(dialect: str, name: str) -> str:
    """The text of ``sql/<dialect>/<name>.sql``, else of ``sql/common/<name>.sql``, without comment lines."""
    if dialect not in _DIALECTS:
        raise ConfigError(f"no SQL files for database dialect {dialect!r}; supported: {', '.join(_DIALECTS)}")
    path = SQL_DIR / dialect / (name + ".sql")
    if not path.is_file():
        path = SQL_DIR / "common" / (name + ".sql")
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(
            f"SQL file {name}.sql is in neither {SQL_DIR / dialect} nor {SQL_DIR / 'common'}; reinstall "
            "shardwise (pip install -e .) so the sql/ package holds its .sql files"
        ) from exc
    lines = [line for line in raw.splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip()


def load_script(dialect: str, name: str) -> list[str]:
    """The statements of a multi-statement file, split on ``;`` (the files hold no ``;`` in literals)."""
    return [stmt.strip() for stmt in load_sql(dialect, name).split(";") if stmt.strip()]


@cache
def query(dialect: str, name: str) -> sa.TextClause:
    """A file as a SQLAlchemy text clause with ``:named`` parameters."""
    return sa.text(load_sql(dialect, name))
