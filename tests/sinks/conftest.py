"""Fixtures of the lake sink tests: a lake location in a temporary directory or on moto's S3.

moto runs in a process of its own (``python -m moto.server``): delta-rs hangs
against a moto server running in the test process itself. Under CI
(``CI=true``) a missing moto fails the S3 tests instead of skipping them, as
``tests/conftest.py``'s ``service_missing`` rules.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator

import boto3
import pytest

_IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
_KEYS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _missing(reason: str) -> None:
    """Skip on a developer's machine; fail under CI, where S3 must be tested (tests/conftest.py's rule)."""
    if _IN_CI:
        pytest.fail(f"{reason} (CI=true: S3 tests must run, not skip)")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """The URL of moto's S3 server, started in its own process for the session and killed after."""
    if importlib.util.find_spec("moto.server") is None or importlib.util.find_spec("flask") is None:
        _missing("moto[server] is not installed; pip install -e '.[dev]'")
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
                    _missing(f"moto's S3 server did not start on {url} (exit code {server.poll()})")
                time.sleep(0.1)
        yield url
    finally:
        server.kill()
        server.wait()


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def location(request: pytest.FixtureRequest, tmp_path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A lake location: a local directory, or s3://<new bucket>/lake on moto via the standard AWS settings."""
    if request.param == "local":
        return str(tmp_path / "lake")
    url = request.getfixturevalue("moto_url")
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    for name, value in _KEYS.items():
        monkeypatch.setenv(name, value)
    bucket = f"sw-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=url, region_name="us-east-1").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/lake"
