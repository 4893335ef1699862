"""``shardwise run`` on PostgreSQL while its COPY and INSERT backends are terminated, 5 times over 10 shards.

Each kill costs a retried database step on a new connection: the run
completes with exactly a clean run's results, and no shard is scored again
(every shard ends on its first attempt).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from flow_data import execute, make_docs
from pg_faults import BackendKiller

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ROWS, SHARDS = 40_000, 10
KILLS = ("COPY", "INSERT", "COPY", "INSERT", "COPY")


def _run(url: str, results_table: str) -> subprocess.CompletedProcess[str]:
    argv = ["run", "--source", url, "--table", "docs", "--model", "tiny", "--shards", str(SHARDS)]
    argv += ["--precision", "fp32", "--results-table", results_table, "--progress", "none"]
    return subprocess.run(
        [sys.executable, "-m", "shardwise.flows.cli", *argv], capture_output=True, text=True, timeout=900
    )


def test_five_killed_backends_over_a_ten_shard_run_cost_no_shard(pg_url: str) -> None:
    make_docs(pg_url, ROWS)
    killer = BackendKiller(pg_url, "faulty", KILLS)
    killer.start()
    try:
        faulty = _run(pg_url, "faulty")
    finally:
        killer.stop.set()
        killer.join(10)
        killer.engine.dispose()
    assert faulty.returncode == 0, faulty.stderr
    assert [target for target, _ in killer.kills] == list(KILLS), killer.kills
    assert f"{ROWS:,} rows scored" in faulty.stdout

    clean = _run(pg_url, "clean")
    assert clean.returncode == 0, clean.stderr
    query = "select source_key, embedding, input_fingerprint from {} order by source_key"
    assert execute(pg_url, query.format("faulty")) == execute(pg_url, query.format("clean"))
    attempts = execute(
        pg_url,
        "select s.attempts from shardwise_shards s join shardwise_runs r using (run_id) "
        "where r.results_table = 'faulty' order by s.shard_id",
    )
    assert attempts == [(1,)] * SHARDS, "a shard was scored again"
