"""Per-shard flow runs on a work pool, end to end, as a user sets them up.

A local ``prefect server``, ``shardwise deploy`` (which creates the process
pool and deploys ``prefect.yaml``), a ``prefect worker`` on that pool, and
``shardwise run --runner deployment``: the parent plans, starts one
``score-shard/per-shard`` child flow run per shard with the idempotency key
``<run_id>:<shard_id>``, reads each child's final state, and finishes the run.
The tests share one server, pool and worker: scoring with the tiny encoder,
and sampling text from a tiny causal LM (``tests/hf_builders.py``).
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
from dataclasses import dataclass
from pathlib import Path

import pytest
from flow_data import execute, make_docs
from hf_builders import GENERATED, generated, tiny_causal_lm

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


@contextlib.contextmanager
def _prefect_server(home: Path) -> Iterator[dict[str, str]]:
    """A real Prefect server on a loopback port, and the environment that points at it."""
    url = f"http://127.0.0.1:{_free_port()}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(home / "prefect-home"),
        "PREFECT_API_URL": url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
    }
    port = url.rsplit(":", 1)[1].split("/")[0]
    log = (home / "server.log").open("w")
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
            assert server.poll() is None and time.monotonic() < deadline, (home / "server.log").read_text()
            time.sleep(0.3)
        yield env
    finally:
        _stop(server)


@dataclass(frozen=True)
class WorkPool:
    env: dict[str, str]
    """The environment that points at the server."""
    worker_log: Path


@pytest.fixture(scope="module")
def work_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkPool]:
    """The set-up a user makes once: a server, ``shardwise deploy`` (the process pool and the deployments
    of prefect.yaml), and a ``prefect worker`` on that pool. The tests of this module share it."""
    home = tmp_path_factory.mktemp("work-pool")
    with _prefect_server(home) as env:
        deployed = subprocess.run(
            [str(BIN / "shardwise"), "deploy"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
        )
        assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
        worker_log = home / "worker.log"
        worker = subprocess.Popen(
            [str(BIN / "prefect"), "worker", "start", "--pool", "shardwise-local"],
            env=env,
            stdout=worker_log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield WorkPool(env, worker_log)
        finally:
            _stop(worker)


def _run(pool: WorkPool, shards: int, *argv: str) -> str:
    """``shardwise run ... --runner deployment`` with ``shards`` shards, which must succeed; its output."""
    command = [str(BIN / "shardwise"), "run", *argv, "--shards", str(shards), "--runner", "deployment"]
    run = subprocess.run(command, env=pool.env, capture_output=True, text=True, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:] + pool.worker_log.read_text()[-4000:]
    assert f"{shards}/{shards} shards done" in output
    return output


def _children_by_key(pool: WorkPool, url: str, shards: int) -> None:
    """One completed child flow run per shard of the run in ``url``, keyed ``run:shard``."""
    run_id = execute(url, "select run_id from shardwise_runs")[0][0]
    keys = [f"{run_id}:{i}" for i in range(shards)]
    children = _child_runs(pool.env["PREFECT_API_URL"], keys)
    assert sorted(children) == keys, "one child flow run per shard, keyed run:shard"
    assert set(children.values()) == {"COMPLETED"}


def test_shards_run_as_child_flow_runs_on_a_process_work_pool(work_pool: WorkPool, pg_url: str) -> None:
    make_docs(pg_url, 240)
    output = _run(work_pool, 3, "--source", pg_url, "--table", "docs", "--model", "tiny")
    assert "240 rows scored" in output
    assert execute(pg_url, "select count(*), count(distinct source_key) from shardwise_results") == [
        (240, 240)
    ]
    assert execute(pg_url, "select count(*) from shardwise_errors") == [(3,)]
    _children_by_key(work_pool, pg_url, 3)


def test_child_flow_runs_generate_what_the_engine_generates(
    work_pool: WorkPool, pg_url: str, tmp_path: Path
) -> None:
    """The run reference travels to each child as JSON parameters: its generation settings must come
    back equal, or the child's model version would not match the plan's."""
    lm = tiny_causal_lm(tmp_path / "lm", context=4096)
    rows = make_docs(pg_url, 24)
    settings = {
        "prompt": "Summarise: {text}",
        "max_new_tokens": 6,
        "temperature": 0.9,
        "top_p": 0.95,
        "seed": 3,
    }
    options = [f"--{name.replace('_', '-')}={value}" for name, value in settings.items()]
    model = ("--model", str(lm), "--precision", "fp32")
    output = _run(work_pool, 2, "--source", pg_url, "--table", "docs", *model, *options)
    assert "24 rows scored" in output and "3 dead letters" in output
    stored = execute(pg_url, f"select source_key, {', '.join(GENERATED)} from shardwise_results")
    assert {int(k): tuple(rest) for k, *rest in stored} == generated(lm, rows[:24], **settings)
    _children_by_key(work_pool, pg_url, 2)


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
