"""The ledger's and the SQL sink's PostgreSQL connections are bounded: a statement or a lock wait by the
server's timers, a connection that stops answering by the client (a stalling TCP proxy in front of the
real server); either fails as transient, and the next try gets a working connection."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa
from tcp_stall import StallingProxy

from shardwise.db.connect import make_engine
from shardwise.db.errors import mapped_errors
from shardwise.db.timeouts import answer_bound, check_db_timeout, unbounded
from shardwise.errors import ConfigError, TransientError
from shardwise.retry_policy import RetryPolicy
from shardwise.watch import WatchSpec

pytestmark = pytest.mark.postgres


def _run(engine: sa.Engine, sql: str) -> object:
    with mapped_errors("test", engine.url), engine.connect() as conn:
        found = conn.exec_driver_sql(sql)
        value = found.scalar() if found.returns_rows else None
        conn.commit()
        return value


def test_the_bound_is_the_statement_timeout_plus_a_margin_and_zero_turns_it_off() -> None:
    assert answer_bound(60) == 70 and answer_bound(2) == 4 and answer_bound(0) is None
    for bad in (-1, "5", True, float("nan")):
        with pytest.raises(ConfigError, match="number of seconds >= 0"):
            check_db_timeout(bad)
    with pytest.raises(ConfigError, match="retry db_timeout_s must be a number of seconds >= 0; got -1"):
        RetryPolicy(db_timeout_s=-1)
    assert RetryPolicy.from_params(RetryPolicy(db_timeout_s=5).to_params()).db_timeout_s == 5
    with pytest.raises(
        ConfigError, match=r"^timeout_s must be a number of seconds >= 0 \(0: no bounds\); got -1$"
    ):
        WatchSpec("sqlite:///x.db", "docs", table="docs", timeout_s=-1)


def test_the_server_ends_a_slow_statement_and_a_lock_wait(pg_url: str) -> None:
    engine = make_engine(pg_url, timeout_s=1)
    holder = sa.create_engine(pg_url)
    try:
        with engine.connect() as conn:
            names = ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")
            shown = [conn.exec_driver_sql(f"SHOW {name}").scalar() for name in names]
        assert shown == ["1s", "500ms", "2s"]
        started = time.monotonic()
        with pytest.raises(TransientError, match=r"statement timeout.*57014"):
            _run(engine, "SELECT pg_sleep(5)")
        assert time.monotonic() - started < 3
        _run(engine, "CREATE TABLE held (id int)")
        with holder.connect() as other:
            other.exec_driver_sql("BEGIN")
            other.exec_driver_sql("LOCK TABLE held IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(TransientError, match=r"lock timeout.*55P03"):
                _run(engine, "INSERT INTO held VALUES (1)")
            other.exec_driver_sql("ROLLBACK")
        assert _run(engine, "SELECT count(*) FROM held") == 0  # the pool's connections still work
    finally:
        engine.dispose()
        holder.dispose()


def test_a_connection_that_stops_answering_is_closed_and_the_next_try_gets_a_new_one(pg_url: str) -> None:
    proxy, url = StallingProxy.before(pg_url)
    engine = make_engine(f"{url}?connect_timeout=2", timeout_s=1)
    try:
        with engine.connect() as conn:
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            proxy.stall()  # mid-session: the next statement is sent and acknowledged, and never answered
            started = time.monotonic()
            with (
                pytest.raises(TransientError, match="sent no answer for 2 s") as caught,
                mapped_errors("read", engine.url),
            ):
                conn.exec_driver_sql("SELECT 1")
            assert 1.9 < time.monotonic() - started < 3.5
            assert "\n" not in str(caught.value)
            assert conn.invalidated  # dropped, never returned to the pool
        started = time.monotonic()
        with pytest.raises(TransientError):  # a new connection stalls too, and is given up as well
            _run(engine, "SELECT 1")
        assert time.monotonic() - started < 8
        proxy.resume()
        assert _run(engine, "SELECT pg_backend_pid()") != pid  # the next try works, on a new connection
    finally:
        engine.dispose()
        proxy.close()


def test_a_stalled_connection_in_a_transaction_does_not_hold_its_locks_for_ever(pg_url: str) -> None:
    proxy, url = StallingProxy.before(pg_url)
    stalled, direct = make_engine(url, timeout_s=1), make_engine(pg_url, timeout_s=1)
    try:
        _run(direct, "CREATE TABLE ledgerish (id int PRIMARY KEY)")
        _run(direct, "INSERT INTO ledgerish VALUES (1)")
        with stalled.connect() as conn:
            conn.exec_driver_sql("BEGIN")
            conn.exec_driver_sql("UPDATE ledgerish SET id = 1")  # holds the row
            proxy.stall()  # the client gives up; the server side of the connection stays open
            with pytest.raises(sa.exc.OperationalError, match="sent no answer"):
                conn.exec_driver_sql("COMMIT")
        # The server ends the orphaned session once idle in its transaction past the bound, and its lock
        # goes with it: a try on a new connection gets the row.
        deadline = time.monotonic() + 10
        while True:
            try:
                _run(direct, "UPDATE ledgerish SET id = 1 RETURNING id")
                break
            except TransientError:
                assert time.monotonic() < deadline, "the orphaned session kept its lock"
    finally:
        proxy.close()
        stalled.dispose()
        direct.dispose()


def test_unbounded_lifts_both_bounds_for_one_block_then_restores_them(pg_url: str) -> None:
    proxy, url = StallingProxy.before(pg_url)
    engine = make_engine(url, timeout_s=1)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            with unbounded(conn):
                assert conn.exec_driver_sql("SHOW statement_timeout").scalar() == "0"
                conn.exec_driver_sql("SELECT pg_sleep(1.5)")  # past the server's timer
                proxy.stall()
                resume = threading.Timer(3.0, proxy.resume)
                resume.start()
                started = time.monotonic()
                assert conn.exec_driver_sql("SELECT 42").scalar() == 42  # waits out a 3 s stall (bound: 2 s)
                assert time.monotonic() - started > 2.5
                resume.join()
            assert conn.exec_driver_sql("SHOW statement_timeout").scalar() == "1s"
            with pytest.raises(sa.exc.OperationalError, match="statement timeout"):
                conn.exec_driver_sql("SELECT pg_sleep(1.5)")
    finally:
        engine.dispose()
        proxy.close()


def test_sqlite_keeps_its_busy_timeout_and_gets_no_bound(tmp_path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'ledger.db'}", timeout_s=1)
    try:
        assert _run(engine, "PRAGMA busy_timeout") == 60000
    finally:
        engine.dispose()


def _stalled_query_fails_in_time(url: str, connected: Any, stalled: Any) -> None:
    """In a forked child: a wait on a connection that then stalls is cut at its bound (exit 0), not hung."""
    engine = make_engine(url, timeout_s=1)
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
        connected.set()
        stalled.wait(10)
        started = time.monotonic()
        try:
            with mapped_errors("read", engine.url):
                conn.exec_driver_sql("SELECT 1")
        except TransientError as exc:
            os._exit(0 if "sent no answer" in str(exc) and time.monotonic() - started < 5 else 2)
    os._exit(1)


def test_a_forked_process_bounds_its_own_waits(pg_url: str) -> None:
    proxy, url = StallingProxy.before(pg_url)
    engine = make_engine(url, timeout_s=1)
    fork = multiprocessing.get_context("fork")
    connected, stalled = fork.Event(), fork.Event()
    try:
        assert _run(engine, "SELECT 1") == 1  # this process's watchdog runs (a fork copies no thread)
        child = fork.Process(target=_stalled_query_fails_in_time, args=(url, connected, stalled))
        child.start()
        assert connected.wait(30)
        proxy.stall()
        stalled.set()
        child.join(30)
        assert child.exitcode == 0
    finally:
        proxy.close()
        engine.dispose()


@pytest.mark.postgres
def test_a_short_query_limit_still_waits_seconds_for_the_servers_answer(pg_url: str) -> None:
    from shardwise.sources.sql.db import LEAST_ANSWER_S, Database

    for limit, waits in ((0.3, answer_bound(LEAST_ANSWER_S)), (30.0, answer_bound(30.0)), (0.0, None)):
        db = Database(pg_url, limit)
        try:
            with db.engine.connect() as conn:
                assert getattr(conn.connection.dbapi_connection, "answer_s", None) == waits, limit
        finally:
            db.dispose()
