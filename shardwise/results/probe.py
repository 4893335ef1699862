"""Whether a ledger's database can serve a command, checked before anything runs and without creating it.

A ledger that cannot serve (a mistyped SQLite path, a directory, a file that
is no SQLite database or is cut short, a read-only file or folder, a
read-only PostgreSQL session, a ledger of another schema version) would
otherwise be found inside the flow run: a failed Prefect flow run, a
traceback, and a resume hint for a run that was never recorded. Here it is
one :class:`~shardwise.errors.ConfigError` line.

What a command needs of it:

``existing``
    reading what was recorded (``shardwise runs``, ``--resume``,
    ``redrive``): an SQLite file must already exist; a missing one is a typo,
    never a new, empty ledger.
``readable``
    a dry run: a missing file is fine (nothing recorded yet); an existing one
    must be an SQLite database that reads.
``writable``
    a run: a missing file must be creatable (its nearest existing folder
    writable), an existing one readable and writable.

The probe opens an existing SQLite file read-only for its reads, and writes
only inside a transaction it rolls back, to see that it may write: nothing
it did is kept.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Literal

import sqlalchemy as sa

from shardwise.db.errors import mapped_errors, safe_url
from shardwise.db.sqlfiles import load_sql
from shardwise.errors import ConfigError
from shardwise.results.schema import LEDGER_TABLES, VERSION_TABLE, check_ledger_version

__all__ = ["LedgerNeed", "check_ledger"]

LedgerNeed = Literal["existing", "readable", "writable"]

_RUNS = "shardwise_runs"


def check_ledger(url: str, need: LedgerNeed, *, makes_folders: bool = False) -> None:
    """Raise a one-line :class:`ConfigError` if the ledger at ``url`` (resolved) cannot serve ``need``.

    ``makes_folders``: the run makes a new SQLite file's missing folders (the
    default ledger beside local results does); a ledger named by ``--ledger``
    must be in a folder that exists, so a mistyped folder is not made.
    """
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        _check_sqlite(Path(parsed.database or ""), safe_url(url), need, makes_folders)
    else:
        _check_server(url, need)


def _check_sqlite(path: Path, shown: str, need: LedgerNeed, makes_folders: bool) -> None:
    if path.is_dir():
        raise ConfigError(
            f"the ledger {shown} is a directory, not an SQLite file; name a file in it, for example "
            f"sqlite:///{path / 'shardwise_ledger.db'}"
        )
    if not path.exists():
        if need == "existing":
            raise ConfigError(
                f"no ledger at {shown}: the file does not exist, so no run was recorded there; check the "
                "path in --ledger (or --results, whose ledger is found the same way)"
            )
        if need == "writable":
            _check_creatable(path, shown, makes_folders)
        return
    if not path.is_file():
        raise ConfigError(f"the ledger {shown} is not a regular file; name an SQLite file")
    try:
        _read_sqlite(path, shown)
        if need == "writable":
            _lock_sqlite(path)
    except sqlite3.Error as exc:
        raise ConfigError(_sqlite_why(exc, shown, need)) from exc


def _read_sqlite(path: Path, shown: str) -> None:
    """Read the schema and the runs table, as ``shardwise runs`` would: a damaged file fails here, and
    a ledger of another schema version is refused (:func:`~shardwise.results.schema.check_ledger_version`)."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10.0)
    try:
        tables = {name for (name,) in conn.execute("select name from sqlite_master where type = 'table'")}
        if _RUNS in tables:
            conn.execute(f"select count(*) from {_RUNS}").fetchone()
        if tables & set(LEDGER_TABLES):
            found = conn.execute(load_sql("sqlite", "ledger_version")) if VERSION_TABLE in tables else []
            check_ledger_version(shown, [int(version) for (version,) in found])
    finally:
        conn.close()


def _lock_sqlite(path: Path) -> None:
    """Write in a transaction rolled back at once: a read-only file or folder refuses it.

    SQLite opens a file it may not write read-only without a word, and in WAL
    mode even takes the write lock: only a write shows it.
    """
    if not os.access(path, os.W_OK):
        raise sqlite3.OperationalError("attempt to write a readonly database")
    conn = sqlite3.connect(path, timeout=10.0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE shardwise_write_probe (x INTEGER)")
        finally:
            conn.execute("ROLLBACK")
    finally:
        conn.close()


def _sqlite_why(exc: sqlite3.Error, shown: str, need: LedgerNeed) -> str:
    text = str(exc)
    if "readonly" in text or "read-only" in text:
        return (
            f"the ledger {shown} is read-only ({text}); a run records its shards there, so make the file "
            "and its folder writable, or give --ledger a writable path"
        )
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return (
            f"the ledger {shown} is not a readable SQLite database ({text}); point --ledger at the ledger "
            "file, or at a new path for a new ledger"
        )
    action = "written" if need == "writable" else "read"
    return f"the ledger {shown} cannot be {action} ({text}); check the file and its folder"


def _check_creatable(path: Path, shown: str, makes_folders: bool) -> None:
    """A new SQLite file is created in its folder, or in the nearest one that exists when the run makes
    the folders below it."""
    folder = path.parent
    if not folder.exists() and not makes_folders:
        raise ConfigError(
            f"the ledger {shown} cannot be created: folder {folder} does not exist; create it, or check "
            "the path in --ledger"
        )
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigError(f"the ledger {shown} cannot be created: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(
            f"the ledger {shown} cannot be created: folder {folder} is not writable; give --ledger a "
            "writable path"
        )


def _check_server(url: str, need: LedgerNeed) -> None:
    """A server database answers (errors mapped as everywhere), its ledger, if any, is of this build's
    schema version; a run's session must be able to write."""
    from shardwise.db.connect import make_engine
    from shardwise.results.ledger_sql import check_version

    engine = make_engine(url)
    try:
        with mapped_errors("open the ledger", engine.url), engine.connect() as conn:
            check_version(conn, safe_url(url))
            if need == "writable" and conn.dialect.name == "postgresql":
                read_only = conn.exec_driver_sql("show transaction_read_only").scalar()
                if read_only == "on":
                    raise ConfigError(
                        f"the ledger {safe_url(url)} is read-only for this session (transaction_read_only "
                        "is on, a standby or a read-only role); give --ledger a writable database"
                    )
    finally:
        engine.dispose()
