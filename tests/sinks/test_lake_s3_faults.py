"""Lake sinks on S3 ride out a dropped answer while opening or reading the table, and refuse a missing
bucket in one line naming it.

A fault proxy (``tests/sources/s3_proxy.py``, run by ``proxy_child.py`` in a process of its own) in
front of moto's S3 server (its own process too) cuts answers on real sockets; the sinks talk to it
as to any S3 endpoint.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from proxy_child import Proxy

from shardwise.errors import ConfigError
from shardwise.retry_policy import RetryPolicy
from shardwise.sinks.delta.sink import DeltaSink, delta_text
from shardwise.sinks.parquet.sink import ParquetSink
from shardwise.testing.rows import LAYOUT, ROWS_PER_CHUNK, chunk

pytestmark = pytest.mark.s3

FAST = RetryPolicy(deadline_s=30, backoff_s=0.01, backoff_cap_s=0.1)
SINKS = {"delta": DeltaSink, "parquet": ParquetSink}


def _proxy(moto_url: str, rule: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Proxy]:
    """The fault proxy in front of moto, as the AWS endpoint of everything in this process."""
    running = Proxy(moto_url, rule)
    monkeypatch.setenv("AWS_ENDPOINT_URL", running.url)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def cutting(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Proxy]:
    """A proxy that cuts the first try of every GET (``proxy_child.first_reads_cut``)."""
    yield from _proxy(moto_url, "first_reads_cut", monkeypatch)


@pytest.fixture
def passing(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Proxy]:
    yield from _proxy(moto_url, "pass_all", monkeypatch)


@pytest.fixture
def bucket(moto_url: str) -> str:
    name = f"sw-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3",
        endpoint_url=moto_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket=name)
    return name


@pytest.mark.parametrize("kind", ["delta", "parquet"])
def test_answers_cut_while_opening_and_reading_the_table_are_ridden_out(
    kind: str, cutting: Proxy, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    location = f"s3://{bucket}/lake"
    make = SINKS[kind]
    with caplog.at_level(logging.WARNING, "shardwise.retry_policy"):
        make(location, "res", LAYOUT, retry=FAST).check()  # nothing there yet
        sink = make(location, "res", LAYOUT, retry=FAST)
        sink.ensure()
        done = sink.commit(chunk(0))  # "already" when a cut came after the commit landed: found on retry
        assert (done.position, done.inserted) == (chunk(0).position, ROWS_PER_CHUNK), done
        fresh = make(location, "res", LAYOUT, retry=FAST)
        assert fresh.stored_key_type() == "int"
        assert [r["source_key"] for r in fresh.read()] == list(range(ROWS_PER_CHUNK))
    cuts = [path for method, path, action in cutting.seen() if action == "cut"]
    assert len(cuts) >= 3, cuts
    retried = [r.getMessage() for r in caplog.records if "failed on try 1" in r.getMessage()]
    assert retried, "no retry was logged"
    assert not any("\x1b" in line for line in retried), retried  # delta-rs's colours are gone


@pytest.mark.parametrize("kind", ["delta", "parquet"])
@pytest.mark.parametrize("step", ["check", "ensure", "stored_key_type"])
def test_a_results_bucket_that_does_not_exist_is_one_line_naming_it_at_once(
    kind: str, step: str, passing: Proxy
) -> None:
    missing = f"sw-missing-{uuid.uuid4().hex[:8]}"
    sink: Any = SINKS[kind](f"s3://{missing}/lake/deep", "res", LAYOUT, retry=FAST)
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        getattr(sink, step)()
    message = str(caught.value)
    assert time.monotonic() - started < 10, "a missing bucket was retried as if it might appear"
    assert message.startswith(f"results bucket {missing!r} does not exist"), message
    assert f"aws s3 mb s3://{missing}" in message and "--results" in message, message
    assert "\n" not in message and "\x1b" not in message and "lake/deep" not in message, message


def test_delta_error_text_loses_its_colours_and_the_location_and_keeps_its_causes() -> None:
    raw = OSError(
        "Generic S3 error\n          \x1b[31m\u21b3\x1b[0m Error performing GET http://h/b/secret-path "
        "in 5ms - HTTP error\n           \x1b[31m\u21b3\x1b[0m end of file before message length reached\n"
        '             \x1b[31m\u21b3\x1b[0m <?xml version="1.0"?><Error><Key>secret-path</Key></Error>\n'
    )
    assert delta_text(raw) == "Generic S3 error <- end of file before message length reached"
