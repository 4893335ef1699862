"""Fixtures of the sink tests: a lake location in a temporary directory or on moto's S3.

moto runs in a process of its own (``python -m moto.server``): delta-rs hangs
against a moto server running in the test process itself. Under CI
(``CI=true``) a missing moto fails the S3 tests instead of skipping them, as
``tests/conftest.py``'s ``service_missing`` rules.
"""

from __future__ import annotations

import uuid

import boto3
import pytest

_KEYS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def location(request: pytest.FixtureRequest, tmp_path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A lake location: a local directory, or s3://<new bucket>/lake on moto via the standard AWS settings."""
    if request.param == "local":
        return str(tmp_path / "lake")
    return request.getfixturevalue("s3_lake")


@pytest.fixture
def s3_lake(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """s3://<new bucket>/lake on moto, its settings in the environment (a child process inherits them)."""
    url = request.getfixturevalue("moto_url")
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    for name, value in _KEYS.items():
        monkeypatch.setenv(name, value)
    bucket = f"sw-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=url, region_name="us-east-1").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/lake"
