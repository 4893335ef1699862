"""Per-shard flow runs on a work pool, end to end, as a user sets them up.

A local ``prefect server``, ``shardwise deploy`` (which creates the process
pool and deploys ``prefect.yaml``), a ``prefect worker`` on that pool, and
``shardwise run --runner deployment``: the parent plans, starts one
``score-shard/per-shard`` child flow run per shard with the idempotency key
``<run_id>:<shard_id>``, reads each child's final state, and finishes the run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from flow_data import execute, make_docs

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(20)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # anything it left in its session


@pytest.fixture
def prefect_server(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A real Prefect server on a loopback port, and the environment that points at it."""
    url = f"http://127.0.0.1:{_free_port()}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_API_URL": url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
    }
    port = url.rsplit(":", 1)[1].split("/")[0]
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", port],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, (
                tmp_path / "server.log"
            ).read_text()
            time.sleep(0.3)
        yield env
    finally:
        _stop(server)


def test_shards_run_as_child_flow_runs_on_a_process_work_pool(
    prefect_server: dict[str, str], pg_url: str, tmp_path: Path
) -> None:
    env = prefect_server
    make_docs(pg_url, 240)
    deployed = subprocess.run(
        [str(BIN / "shardwise"), "deploy"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    worker_log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [str(BIN / "prefect"), "worker", "start", "--pool", "shardwise-local"],
        env=env,
        stdout=worker_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        command = [
            str(BIN / "shardwise"),
            "run",
            "--source",
            pg_url,
            "--table",
            "docs",
            "--model",
            "tiny",
            "--shards",
            "3",
            "--runner",
            "deployment",
        ]
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    finally:
        _stop(worker)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:] + (tmp_path / "worker.log").read_text()[-4000:]
    assert "240 rows scored" in output and "3/3 shards done" in output
    assert execute(pg_url, "select count(*), count(distinct source_key) from shardwise_results") == [
        (240, 240)
    ]
    assert execute(pg_url, "select count(*) from shardwise_errors") == [(3,)]
    run_id = execute(pg_url, "select run_id from shardwise_runs")[0][0]
    keys = [f"{run_id}:{i}" for i in range(3)]
    children = _child_runs(env["PREFECT_API_URL"], keys)
    assert sorted(children) == keys, "one child flow run per shard, keyed run:shard"
    assert set(children.values()) == {"COMPLETED"}


def _child_runs(api: str, keys: list[str]) -> dict[str, str]:
    """The flow runs with these idempotency keys: key -> final state."""
    import json

    body = json.dumps({"flow_runs": {"idempotency_key": {"any_": keys}}}).encode()
    request = urllib.request.Request(
        f"{api}/flow_runs/filter", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        runs = json.loads(answer.read())
    return {r["idempotency_key"]: r["state_type"] for r in runs}
