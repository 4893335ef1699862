"""The SQL files: one home per statement, dialect words filled in per dialect."""

from __future__ import annotations

import sqlite3

import pytest

from shardwise.db import sqlfiles
from shardwise.db.sqlfiles import DIALECT_WORDS, SQL_DIR, load_script, load_sql
from shardwise.errors import ConfigError
from shardwise.results.schema import LEDGER_SCRIPTS, LEDGER_TABLES


def test_no_statement_is_written_twice_for_the_two_dialects() -> None:
    sqlite = {p.name: p.read_text() for p in (SQL_DIR / "sqlite").glob("*.sql")}
    postgres = {p.name: p.read_text() for p in (SQL_DIR / "postgresql").glob("*.sql")}
    common = {p.name for p in (SQL_DIR / "common").glob("*.sql")}
    assert not {n for n in sqlite.keys() & postgres.keys() if sqlite[n] == postgres[n]}, "move it to common/"
    assert not (sqlite.keys() | postgres.keys()) & common, "a dialect's file hides the common one"


@pytest.mark.parametrize("dialect", sorted(DIALECT_WORDS))
def test_every_common_file_loads_for_both_dialects_with_its_words_filled(dialect: str) -> None:
    for path in sorted((SQL_DIR / "common").glob("*.sql")):
        text = load_sql(dialect, path.stem)
        assert "{" not in text.replace('{"', ""), (path.name, text)
    schema = "\n".join(load_script(dialect, "ledger_schema"))
    assert ("timestamptz" in schema) == (dialect == "postgresql")
    assert ("INTEGER PRIMARY KEY" in schema) == (dialect == "sqlite")


def test_the_shared_schema_creates_the_whole_ledger_on_sqlite() -> None:
    conn = sqlite3.connect(":memory:")
    for script in LEDGER_SCRIPTS:
        for stmt in load_script("sqlite", script):
            conn.execute(stmt)
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == set(LEDGER_TABLES)
    types = {row[1]: row[2] for row in conn.execute("PRAGMA table_info(shardwise_runs)")}
    assert types["started_at"].lower() == types["parameters"].lower() == "text"


def test_an_unknown_dialect_word_is_one_line(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "odd.sql").write_text("SELECT {NOPE}\n")
    monkeypatch.setattr(sqlfiles, "SQL_DIR", tmp_path)
    sqlfiles.load_sql.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"unknown dialect word \{NOPE\}; known: DOUBLE, FOR_UPDATE"):
            load_sql("sqlite", "odd")
    finally:
        sqlfiles.load_sql.cache_clear()
