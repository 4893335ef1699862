"""The ledger records its schema version when created; a ledger of another layout is refused in one line.

Nothing was released before version 1, so no build upgrades a ledger: one
made by an older build (its tables, no version) or a newer one (another
version) is refused before anything runs, and the message says how to start
a new one.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from flow_data import execute, make_docs
from results_helpers import make_plan, make_run

from shardwise.db.errors import safe_url
from shardwise.errors import ConfigError
from shardwise.flows.cli import main
from shardwise.results import Ledger
from shardwise.results.schema import LEDGER_SCHEMA_VERSION

_OLD_RUNS = "CREATE TABLE shardwise_runs (run_id text PRIMARY KEY, status text NOT NULL)"


def _versions(url: str) -> list[tuple[int, ...]]:
    return execute(url, "SELECT version FROM shardwise_schema")


def _refused(url: str, capfd: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the command, which must exit 2 with one line on stderr naming the ledger, and no traceback."""
    assert main(list(argv)) == 2
    captured = capfd.readouterr()
    err = captured.err.strip()
    assert "Traceback" not in captured.err + captured.out, captured.err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("shardwise: error: the ledger " + safe_url(url)), err
    return err


def test_a_new_ledger_records_its_schema_version(db_url: str) -> None:
    assert LEDGER_SCHEMA_VERSION == 1
    with Ledger(db_url) as ledger:
        ledger.ensure()
        ledger.ensure()  # idempotent: one row
        ledger.start_run(make_run(), make_plan(2))
    assert _versions(db_url) == [(LEDGER_SCHEMA_VERSION,)]
    with Ledger(db_url) as reopened:  # a later process opens it without a word
        assert [run.run_id for run in reopened.recent_runs()] == [make_run().run_id]


def test_a_ledger_made_before_versions_is_refused_before_anything_runs(
    db_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    execute(db_url, _OLD_RUNS)
    err = _refused(db_url, capfd, "runs", "--ledger", db_url)
    assert "has no schema version (an older build of shardwise made it)" in err, err
    assert (
        f"needs schema version {LEDGER_SCHEMA_VERSION}" in err
        and "give --ledger a new database URL or SQLite file" in err
    )
    assert "drop the shardwise_* tables" in err
    with Ledger(db_url) as ledger:
        for use in (ledger.ensure, ledger.recent_runs, lambda: ledger.load_run("r"), ledger.exists):
            with pytest.raises(ConfigError, match="has no schema version"):
                use()
    tables = set(sa.inspect(sa.create_engine(db_url)).get_table_names())
    assert tables == {"shardwise_runs"}, "a refused ledger is left as it was"


def test_a_ledger_of_another_version_is_refused(db_url: str, capfd: pytest.CaptureFixture[str]) -> None:
    with Ledger(db_url) as ledger:
        ledger.ensure()
    execute(db_url, f"UPDATE shardwise_schema SET version = {LEDGER_SCHEMA_VERSION + 1}")
    err = _refused(db_url, capfd, "runs", "--ledger", db_url)
    assert (
        f"has schema version {LEDGER_SCHEMA_VERSION + 1}, and this build needs schema version "
        f"{LEDGER_SCHEMA_VERSION}"
    ) in err, err
    assert "use the newer shardwise that made it, or start a new one" in err
    execute(db_url, "DELETE FROM shardwise_schema")
    with Ledger(db_url) as ledger, pytest.raises(ConfigError, match="has no schema version"):
        ledger.start_run(make_run(), make_plan(2))


def test_a_run_into_an_old_ledger_is_refused_before_it_starts(
    sqlite_url: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 5, bad=False)
    ledger = f"sqlite:///{tmp_path / 'old.db'}"
    execute(ledger, _OLD_RUNS)
    argv = ["run", "--source", sqlite_url, "--table", "docs", "--model", "tiny", "--ledger", ledger]
    err = _refused(ledger, capfd, *argv)
    assert "has no schema version" in err, err
    assert execute(ledger, "SELECT count(*) FROM shardwise_runs") == [(0,)]


_CREATE = """
import sys, time
from pathlib import Path
from shardwise.results import Ledger
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.005)
with Ledger(sys.argv[1]) as ledger:
    ledger.ensure()
"""


def test_two_processes_creating_the_ledger_at_once_both_succeed(db_url: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", _CREATE, db_url, str(go)], stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    time.sleep(3.0)  # both have imported shardwise and wait for the word
    go.touch()
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert _versions(db_url) == [(LEDGER_SCHEMA_VERSION,)]
    with Ledger(db_url) as ledger:
        assert ledger.exists()
