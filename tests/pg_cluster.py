"""A PostgreSQL cluster of a test's own, on another port, that the test may stop and start.

Never the shared cluster on 5432: tests that need a database outage or a
restart create one with Debian's ``pg_createcluster`` and drop it afterwards.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import sqlalchemy as sa


@dataclass(frozen=True)
class OwnCluster:
    version: str
    name: str
    port: int

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://root@127.0.0.1:{self.port}/postgres"

    def _ctl(self, action: str, *extra: str) -> None:
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, action, *extra],
            check=True,
            capture_output=True,
        )

    def stop(self) -> None:
        self._ctl("stop", "-m", "fast")

    def start(self) -> None:
        self._ctl("start")
        _wait_up(self.url)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_up(url: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        engine = sa.create_engine(url)
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("select 1"))
            return
        except sa.exc.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
        finally:
            engine.dispose()


def cluster_tools_missing() -> str | None:
    """Why a private cluster cannot be made here, or None."""
    if shutil.which("pg_createcluster") is None or not os.path.isdir("/etc/postgresql"):
        return "pg_createcluster is not installed (Debian's postgresql-common)"
    return None


@contextmanager
def own_cluster() -> Iterator[OwnCluster]:
    """A new cluster with trust auth and a ``root`` superuser, started; dropped afterwards."""
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    cluster = OwnCluster(version, f"sw{uuid.uuid4().hex[:8]}", _free_port())
    subprocess.run(
        ["pg_createcluster", version, cluster.name, "-p", str(cluster.port), "--", "--auth=trust"],
        check=True,
        capture_output=True,
    )
    try:
        cluster._ctl("start")
        subprocess.run(
            ["runuser", "-u", "postgres", "--", "psql", "-p", str(cluster.port), "-h", "127.0.0.1",
             "-c", "CREATE ROLE root SUPERUSER LOGIN"],
            check=True,
            capture_output=True,
        )  # fmt: skip
        _wait_up(cluster.url)
        yield cluster
    finally:
        subprocess.run(["pg_dropcluster", "--stop", version, cluster.name], capture_output=True)
