"""What the command-line tests check after a refused command: one line on stderr, no run in the ledger,
no flow run on the Prefect server."""

from __future__ import annotations

import asyncio
import socket

import pytest
from flow_data import execute

__all__ = ["flow_runs", "free_port", "ledger_runs", "one_line"]


def ledger_runs(url: str) -> int:
    """How many runs the ledger of ``url`` recorded (rows of shardwise_runs)."""
    return int(execute(url, "select count(*) from shardwise_runs")[0][0])


def flow_runs() -> int:
    """How many flow runs the Prefect server in force (the test harness's) holds."""
    from prefect.client.orchestration import get_client

    async def count() -> int:
        async with get_client() as client:
            return await client.count_flow_runs()

    return asyncio.run(count())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def one_line(capfd: pytest.CaptureFixture[str]) -> str:
    """The one line a refused command printed on stderr; no traceback on either stream."""
    captured = capfd.readouterr()
    err = captured.err.strip()
    assert "Traceback" not in captured.err + captured.out, captured.err
    assert len(err.splitlines()) == 1, err
    return err
