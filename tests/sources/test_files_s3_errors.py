"""botocore errors map onto the Shardwise tree by kind: retry the transient ones, fail fast on the rest."""

from __future__ import annotations

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)

from shardwise.errors import ConfigError, ShardwiseError, SourceError, TransientError
from shardwise.sources.files.s3 import parse_s3_url
from shardwise.sources.files.s3_errors import map_s3_error, s3_boundary


def client_error(code: str, status: int) -> ClientError:
    response = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "GetObject")


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("SlowDown", 503, TransientError),
        ("ServiceUnavailable", 503, TransientError),
        ("RequestTimeout", 400, TransientError),
        ("InternalError", 500, TransientError),
        ("SomethingNew", 502, TransientError),
        ("NoSuchBucket", 404, SourceError),
        ("NoSuchKey", 404, SourceError),
        ("AccessDenied", 403, SourceError),
        ("InvalidBucketName", 400, ConfigError),
        ("SomethingElse", 400, SourceError),
    ],
)
def test_client_errors_map_by_code_and_status(code: str, status: int, kind: type[ShardwiseError]) -> None:
    error = map_s3_error(client_error(code, status), "reading s3://b/k")
    assert type(error) is kind
    assert code in str(error) and "reading s3://b/k" in str(error)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (EndpointConnectionError(endpoint_url="http://x"), TransientError),
        (ConnectTimeoutError(endpoint_url="http://x"), TransientError),
        (ReadTimeoutError(endpoint_url="http://x"), TransientError),
        (NoCredentialsError(), ConfigError),
        (ParamValidationError(report="bad bucket"), ConfigError),
    ],
)
def test_botocore_errors_map_by_class(exc: Exception, kind: type[ShardwiseError]) -> None:
    assert type(map_s3_error(exc, "listing s3://b/p")) is kind


def test_the_boundary_keeps_the_cause() -> None:
    cause = client_error("SlowDown", 503)
    with pytest.raises(TransientError) as caught, s3_boundary("listing s3://b/p"):
        raise cause
    assert caught.value.__cause__ is cause


def test_s3_urls_need_a_bucket() -> None:
    assert parse_s3_url("s3://bucket/a/b.parquet") == ("bucket", "a/b.parquet")
    assert parse_s3_url("s3://bucket") == ("bucket", "")
    with pytest.raises(ConfigError, match="has no bucket"):
        parse_s3_url("s3:///prefix/")
