"""Leases while a run works, without an orchestrator: renewed while alive, abandoned once renewal stops."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa
from flow_data import execute, make_docs, slow_tiny_shards
from spec_builder import flat_spec

from shardwise.db.codec import decode_timestamp, utc_now
from shardwise.errors import ConfigError
from shardwise.pipeline import RunSpec, this_worker
from shardwise.process import procfs
from shardwise.results import Ledger
from shardwise.results.owners import Owner

ROWS = 300


def _spec(url: str, **kw: object) -> RunSpec:
    base = {
        "source": url,
        "results": url,
        "results_table": "scores",
        "table": "docs",
        "shards": 2,
        "model": "tiny",
    }
    return flat_spec(**{**base, "precision": "fp32", **kw})  # type: ignore[arg-type]


def _leases(url: str, run_id: str) -> tuple[object, list[tuple[object, ...]]]:
    run = execute(url, "select lease_expires_at from shardwise_runs where run_id = :r", {"r": run_id})
    shards = execute(
        url,
        "select shard_id, owner, lease_expires_at from shardwise_shards "
        "where run_id = :r and owner is not null",
        {"r": run_id},
    )
    return run[0][0], shards


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_run_and_each_shard_renew_their_leases_while_they_work(
    db: str, request: pytest.FixtureRequest, pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url")
    make_docs(url, ROWS, bad=False)
    slow_tiny_shards(monkeypatch, 0.2, 0.1)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(pipeline.run, _spec(url, lease_s=2), "leased")
        run_leases, shard_leases = set(), set()
        while not running.done():
            try:
                run_lease, shards = _leases(url, "leased")
            except (sa.exc.DBAPIError, IndexError):  # not recorded yet
                continue
            finally:
                time.sleep(0.1)
            run_leases.add(run_lease)
            shard_leases.update(shards)
        planned, counts = running.result()
    assert counts.rows_out == ROWS
    assert len(run_leases) >= 3, f"the flow's process renewed the run's lease: {run_leases}"
    owners = {owner for _, owner, _ in shard_leases}
    assert len(owners) == 1 and str(owners.pop()).startswith(f"{this_worker().host}:"), shard_leases
    renewals = [len({e for s, _, e in shard_leases if s == shard}) for shard in (0, 1)]
    assert max(renewals) >= 3, f"a worker renewed its shard's lease while scoring: {shard_leases}"
    with Ledger(url) as ledger:
        summary = ledger.run_summary("leased")
    assert summary is not None and summary.owner == planned.owner
    assert summary.lease_expires_at == summary.finished_at and summary.state() == "completed"


def test_a_run_that_stops_renewing_shows_abandoned_and_its_resume_counts_on(
    sqlite_url: str, pipeline
) -> None:
    """The planning process dies mid-run: its keeper stops, nothing is released, the lease runs out."""
    make_docs(sqlite_url, 40, bad=False)
    planned = pipeline.plan(_spec(sqlite_url, lease_s=2), "died")
    pipeline.shard(planned, 1)
    planned.ledger.record_attempt("died", 0, owner="worker:99/0", lease_s=2)  # a worker dies mid-shard
    assert planned.keeper is not None
    planned.keeper.stop()  # the process dies: renewals stop, and nobody releases the lease
    planned.ledger.close()
    with Ledger(sqlite_url) as ledger:
        assert ledger.run_summary("died").state() == "running"  # type: ignore[union-attr]
        time.sleep(2.2)
        summary = ledger.run_summary("died")
        assert summary is not None and (summary.status, summary.state()) == ("running", "abandoned")
        assert (summary.counts.shards_done, summary.counts.rows_out) == (1, 20), "counts are live"
        (listed,) = ledger.recent_runs()
        assert (listed.run_id, listed.state(), listed.counts.shards_done) == ("died", "abandoned", 1)

    resumed_in: list[object] = []
    thread = threading.Thread(  # another thread is another owner: a new process, as far as leases go
        target=lambda: resumed_in.append(pipeline.run(_spec(sqlite_url, resume="died"), "unused"))
    )
    thread.start()
    thread.join()
    resumed, counts = resumed_in[0]  # type: ignore[misc]
    assert resumed.took_over.state == "abandoned" and resumed.took_over.owner == planned.owner
    assert counts.rows_out == 40
    attempts = execute(sqlite_url, "select shard_id, attempts from shardwise_shards order by shard_id")
    assert attempts == [(0, 2), (1, 1)], "the resume's attempt at the dead worker's shard is its second"


def test_closing_an_unfinished_run_releases_its_lease_at_once(sqlite_url: str, pipeline) -> None:
    make_docs(sqlite_url, 20, bad=False)
    pipeline.plan(_spec(sqlite_url), "interrupted").close()
    with Ledger(sqlite_url) as ledger:
        summary = ledger.run_summary("interrupted")
    assert summary is not None and summary.state() == "abandoned", "nobody works on it: resume it now"
    engine = sa.create_engine(sqlite_url)
    with engine.connect() as conn:
        expiry = conn.execute(sa.text("select lease_expires_at from shardwise_runs")).scalar()
    engine.dispose()
    assert decode_timestamp(expiry) is not None


def _ended_process_owner() -> str:
    """The owner string of a process of this host that has ended, as that process wrote it."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    start = procfs.started(child.pid)
    child.kill()
    child.wait()
    return str(Owner(socket.gethostname(), child.pid, 0, start, procfs.pid_namespace()))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_live_lease_whose_process_here_is_gone_is_resumed_at_once_and_one_elsewhere_waits(
    sqlite_url: str, pipeline
) -> None:
    """A killed run's lease (60 s) has long to run: on this host its process is seen gone, elsewhere not."""
    make_docs(sqlite_url, 40, bad=False)
    planned = pipeline.plan(_spec(sqlite_url), "killed")
    assert planned.keeper is not None
    planned.keeper.stop()  # the process dies: renewals stop, and nobody releases the lease
    planned.ledger.close()
    owner = "update shardwise_runs set owner = :owner"
    for elsewhere in ("elsewhere:4242/0@4026531836:98765", f"{this_worker().host}:4242/0"):
        execute(sqlite_url, owner, {"owner": elsewhere})  # another host's; or written before starts were
        with pytest.raises(ConfigError, match=f"still running on {elsewhere}"):
            pipeline.run(_spec(sqlite_url, resume="killed"), "unused")
    gone = _ended_process_owner()
    execute(sqlite_url, owner, {"owner": gone})
    with Ledger(sqlite_url) as ledger:
        (listed,) = ledger.recent_runs()
    assert listed.state() == "abandoned" and listed.lease_expires_at is not None
    assert listed.lease_expires_at > utc_now(), "its lease has yet to run out"

    resumed, counts = pipeline.run(_spec(sqlite_url, resume="killed"), "unused")
    assert resumed.took_over is not None and resumed.took_over.owner == gone
    assert resumed.took_over.gone and not resumed.took_over.forced, "taken without --force"
    assert "a process of this host now gone" in resumed.took_over.describe()
    assert counts.rows_out == 40


def test_a_thread_that_reuses_an_ended_threads_ident_is_another_owner() -> None:
    seen: list[tuple[int, str]] = []

    def record() -> None:
        seen.append((threading.get_ident(), this_worker().worker))

    for _ in range(20):  # pthreads hands an ended thread's ident to the next one, mostly at once
        with ThreadPoolExecutor(1) as pool:
            pool.submit(record).result()
    idents = [ident for ident, _ in seen]
    assert len(set(idents)) < len(idents), "no ident was reused: this host cannot show the fault"
    assert len({worker for _, worker in seen}) == len(seen), "an ended thread's owner was handed on"
