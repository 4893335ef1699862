"""S3 reads survive dropped connections: real faults injected by a loopback proxy in front of moto.

The proxy (:mod:`s3_proxy`) cuts answers mid-body, answers 503 or 403 itself,
or drops ``If-Match``, on real sockets; the client under test is a plain
boto3 client pointed at it. Each test counts the requests the proxy saw, so
"retried" and "not retried" are facts about the wire, not about mocks.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import boto3
import pytest
from botocore.exceptions import IncompleteReadError, ResponseStreamingError
from flow_data import execute, put_parquet
from s3_proxy import FaultProxy, Seen, cut_first_tries, pass_all, seeded_cuts
from spec_builder import flat_spec, respec

from shardwise.errors import ConfigError, RetryDeadlineError, SourceError, TransientError
from shardwise.retry_policy import RetryPolicy
from shardwise.sources import ParquetSource
from shardwise.sources.files.s3 import S3ClientConfig, S3Store
from shardwise.sources.files.s3_errors import map_s3_error

SMALL_GROUPS = {"row_group_size": 20, "compression": "snappy"}
FAST = RetryPolicy(deadline_s=5, backoff_s=0.01, backoff_cap_s=0.05)


def proxied_client(proxy: FaultProxy, policy: S3ClientConfig | None = None) -> Any:
    """A boto3 client that talks to the proxy, configured as :class:`S3Store` configures its own."""
    return boto3.client(
        "s3",
        endpoint_url=proxy.url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=(policy or S3ClientConfig()).client_config(),
    )


def ranged_gets(proxy: FaultProxy) -> list[Seen]:
    return [s for s in proxy.log if s.method == "GET" and s.range]


@pytest.fixture
def proxy(s3_endpoint: Any) -> Iterator[FaultProxy]:
    with FaultProxy(s3_endpoint.url) as running:
        yield running


@pytest.fixture
def blob(client: Any, bucket: str) -> bytes:
    data = random.Random(3).randbytes(300_000)
    client.put_object(Bucket=bucket, Key="blobs/one.bin", Body=data)
    return data


def open_blob(store: S3Store) -> Any:
    return store.open(store.listing().objects[0])


@pytest.mark.s3
@pytest.mark.parametrize("fault", ["cut", "short"])
def test_a_body_cut_mid_stream_is_read_again(
    fault: str, proxy: FaultProxy, bucket: str, blob: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """``cut`` drops the socket mid-body; ``short`` sends half the body with a Content-Length that agrees."""
    store = S3Store(f"s3://{bucket}/blobs/one.bin", proxied_client(proxy), FAST)
    proxy.rule = lambda seen: fault if seen.repeat == 0 else "pass"
    with caplog.at_level(logging.WARNING, "shardwise.retry_policy"), open_blob(store) as handle:
        handle.seek(1000)
        got = handle.read(250_000)
    assert got == blob[1000:251_000]
    assert [(s.range, s.action) for s in ranged_gets(proxy)] == [
        ("bytes=1000-250999", fault),
        ("bytes=1000-250999", "pass"),
    ]
    # botocore retries a listing whose XML ends early (S3's "200 with an error" rule), cut or short.
    assert [s.action for s in proxy.log if not s.range] == [fault, "pass"]
    assert [r.getMessage() for r in caplog.records if "bytes 1000-250999 failed on try 1 (" in r.getMessage()]


@pytest.mark.s3
def test_a_range_that_keeps_dropping_gives_up_at_the_run_s_deadline(
    proxy: FaultProxy, bucket: str, blob: bytes
) -> None:
    store = S3Store(f"s3://{bucket}/blobs/one.bin", proxied_client(proxy), replace(FAST, deadline_s=0.5))
    with open_blob(store) as handle:
        proxy.rule = lambda seen: "cut" if seen.range else "pass"
        started = time.monotonic()
        with pytest.raises(
            RetryDeadlineError, match=r"bytes 0-99 kept failing .* deadline of 0\.5 s.*dropped or stalled"
        ):
            handle.read(100)
    assert 0.5 <= time.monotonic() - started < 3
    assert len(ranged_gets(proxy)) >= 5  # every 0.01 to 0.05 s until the deadline


@pytest.mark.s3
def test_throttling_and_5xx_on_a_get_are_retried(proxy: FaultProxy, bucket: str, blob: bytes) -> None:
    # No botocore retries here, so the 503s reach S3RangeFile's own loop.
    store = S3Store(
        f"s3://{bucket}/blobs/one.bin", proxied_client(proxy, S3ClientConfig(client_retries=0)), FAST
    )
    with open_blob(store) as handle:
        proxy.rule = lambda seen: "503" if seen.range and seen.repeat < 2 else "pass"
        assert handle.read(64) == blob[:64]
    assert [s.action for s in ranged_gets(proxy)] == ["503", "503", "pass"]


@pytest.mark.s3
def test_a_run_through_a_flaky_network_scores_what_a_clean_run_scores(
    proxy: FaultProxy, s3_env: Any, client: Any, bucket: str, tmp_path: Any, pipeline: Any, monkeypatch: Any
) -> None:
    for f in range(3):
        put_parquet(
            client, bucket, f"docs/part-{f}.parquet", list(range(f * 80, (f + 1) * 80)), **SMALL_GROUPS
        )
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)  # the source's own client, from the AWS settings
    clean_db, flaky_db = (f"sqlite:///{tmp_path / name}.db" for name in ("clean", "flaky"))
    spec = flat_spec(
        model="tiny", source=f"s3://{bucket}/docs/", results=clean_db, results_table="scores", shards=4
    )

    _, clean = pipeline.run(spec, "clean")
    assert proxy.actions()["cut"] == 0
    proxy.reset(seeded_cuts(0.10, seed=6))  # this seed cuts the listing, a footer and row-group reads
    _, flaky = pipeline.run(respec(spec, results=flaky_db), "flaky")

    cut = [seen for seen in proxy.log if seen.action == "cut"]
    assert any(s.range is None for s in cut) and sum(s.range is not None for s in cut) >= 3, cut
    assert (flaky.rows_out, flaky.shards_failed) == (clean.rows_out, clean.shards_failed) == (240, 0)
    rows = "select source_key, embedding from scores order by source_key"
    assert execute(flaky_db, rows) == execute(clean_db, rows)


@pytest.mark.s3
def test_planning_reads_footers_through_dropped_connections(
    proxy: FaultProxy, client: Any, bucket: str
) -> None:
    for f in range(3):
        put_parquet(
            client, bucket, f"docs/part-{f}.parquet", list(range(f * 100, (f + 1) * 100)), **SMALL_GROUPS
        )
    clean = ParquetSource(f"s3://{bucket}/docs/", s3_client=client).plan(shards=5)
    proxy.rule = cut_first_tries  # the listing and every footer read drop once
    plan = ParquetSource(f"s3://{bucket}/docs/", s3_client=proxied_client(proxy)).plan(shards=5)
    assert plan == clean
    footer_reads = ranged_gets(proxy)
    assert {s.path for s in footer_reads} == {f"/{bucket}/docs/part-{f}.parquet" for f in range(3)}
    assert all(s.repeat <= 1 for s in footer_reads)
    assert sum(s.action == "cut" for s in footer_reads) == sum(s.repeat == 1 for s in footer_reads) >= 3


@pytest.mark.s3
@pytest.mark.parametrize("honours_if_match", [True, False], ids=["if-match", "etag-check"])
def test_an_object_replaced_after_listing_fails_once_without_retries(
    honours_if_match: bool, s3_endpoint: Any, client: Any, bucket: str
) -> None:
    """Against S3 and moto, If-Match makes the GET a 412; a store that drops it is caught by the ETag."""
    put_parquet(client, bucket, "docs/a.parquet", list(range(50)), **SMALL_GROUPS)
    dropped = frozenset() if honours_if_match else frozenset({"If-Match"})
    with FaultProxy(s3_endpoint.url, drop_headers=dropped) as proxy:
        source = ParquetSource(f"s3://{bucket}/docs/", s3_client=proxied_client(proxy))
        plan = source.plan()
        put_parquet(client, bucket, "docs/a.parquet", list(range(60)), **SMALL_GROUPS)
        proxy.log.clear()
        detail = "PreconditionFailed" if honours_if_match else "S3 sent etag"
        with pytest.raises(SourceError, match=rf"a.parquet' changed since it was listed.*{detail}"):
            list(source.read(plan, plan.shards[0]))
        assert len(ranged_gets(proxy)) == 1


@pytest.mark.s3
@pytest.mark.parametrize(
    ("status", "message"),
    [("403", "access was refused"), ("404", r"changed since it was listed.*NoSuchKey")],
)
def test_a_refused_or_missing_object_is_not_retried(
    status: str, message: str, proxy: FaultProxy, bucket: str, blob: bytes
) -> None:
    store = S3Store(f"s3://{bucket}/blobs/one.bin", proxied_client(proxy))
    with open_blob(store) as handle:
        proxy.rule = lambda seen: status if seen.range else "pass"
        with pytest.raises(SourceError, match=message):
            handle.read(10)
    assert [s.action for s in ranged_gets(proxy)] == [status]


@pytest.mark.s3
def test_a_refused_listing_is_not_retried(proxy: FaultProxy, bucket: str) -> None:
    proxy.rule = lambda seen: "403"
    with pytest.raises(SourceError, match="access was refused"):
        ParquetSource(f"s3://{bucket}/docs/", s3_client=proxied_client(proxy)).plan()
    assert len(proxy.log) == 1
    proxy.reset(pass_all)
    with pytest.raises(SourceError, match="NoSuchBucket"):
        ParquetSource(f"s3://no-such-{bucket}/docs/", s3_client=proxied_client(proxy)).plan()
    assert len(proxy.log) == 1


@pytest.mark.s3
def test_the_store_s_own_client_has_standard_retries_and_timeouts(s3_env: Any) -> None:
    store = S3Store("s3://bucket/prefix/", config=S3ClientConfig(client_retries=6, read_timeout_s=12))
    config = store.client().meta.config
    assert config.retries == {"mode": "standard", "total_max_attempts": 7}
    assert (config.connect_timeout, config.read_timeout) == (10.0, 12)
    store.close()


def test_the_client_config_checks_itself() -> None:
    assert S3ClientConfig().client_retries == 4
    for bad in ({"client_retries": -1}, {"connect_timeout_s": 0}, {"read_timeout_s": 0}):
        with pytest.raises(ConfigError, match=f"S3ClientConfig.{next(iter(bad))} must be"):
            S3ClientConfig(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "exc",
    [
        ResponseStreamingError(error="Connection broken"),
        IncompleteReadError(actual_bytes=5, expected_bytes=9),
    ],
)
def test_a_dropped_body_maps_to_a_transient_error(exc: Exception) -> None:
    error = map_s3_error(exc, "reading s3://b/k bytes 0-8")  # type: ignore[arg-type]
    assert type(error) is TransientError and "dropped or stalled while reading" in str(error)
