"""Fixtures of the source tests: an S3 client on the loopback moto server, and a fresh bucket."""

from __future__ import annotations

import uuid
from typing import Any

import pytest


@pytest.fixture
def client(s3_endpoint: Any) -> Any:
    """A boto3 S3 client for the test's moto server."""
    return s3_endpoint.client()


@pytest.fixture
def bucket(client: Any) -> str:
    """A new, empty bucket of its own."""
    name = f"sw-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return name
