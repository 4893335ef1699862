"""Map botocore errors onto the Shardwise error tree, at the S3 boundary.

Throttling (including a bare 429), timeouts, dropped connections and 5xx
answers may pass on a retry: :class:`TransientError`. So may a body cut off
mid-stream (``ResponseStreamingError``, ``IncompleteReadError``, a read
timeout), which :class:`~shardwise.sources.files.s3.S3RangeFile` retries
by reading the same range again. A missing bucket or object and a refused
access are :class:`SourceError`; missing or malformed settings (credentials,
region, parameters) are :class:`ConfigError`. Unknown 4xx answers are
permanent too, so they are :class:`SourceError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    PartialCredentialsError,
    ProfileNotFound,
    ReadTimeoutError,
    ResponseStreamingError,
)

from shardwise.errors import ConfigError, ShardwiseError, SourceError, TransientError

__all__ = ["map_s3_error", "s3_boundary"]

_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "InternalError",
        "ServiceUnavailable",
        "503",
        "500",
    }
)
_MISSING_CODES = frozenset({"NoSuchBucket", "NoSuchKey", "404", "NotFound"})
_DENIED_CODES = frozenset(
    {"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled"}
)
_CONFIG_ERRORS = (NoCredentialsError, PartialCredentialsError, NoRegionError, ProfileNotFound)
_BODY_ERRORS = (ResponseStreamingError, IncompleteReadError, ReadTimeoutError)
_NETWORK_ERRORS = (HTTPClientError, ConnectionError)


@contextmanager
def s3_boundary(what: str) -> Iterator[None]:
    """Run an S3 call, re-raising its botocore errors as Shardwise errors (``what`` names the call)."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise map_s3_error(exc, what) from exc


def map_s3_error(exc: ClientError | BotoCoreError, what: str) -> ShardwiseError:
    """The Shardwise error for a botocore error raised while ``what`` (e.g. "listing s3://b/p")."""
    if isinstance(exc, ClientError):
        return _map_client_error(exc, what)
    if isinstance(exc, _BODY_ERRORS):
        return TransientError(f"S3 connection dropped or stalled while {what}: {exc}; retrying may succeed")
    if isinstance(exc, _NETWORK_ERRORS):
        return TransientError(f"S3 connection failed while {what}: {exc}; retrying may succeed")
    if isinstance(exc, _CONFIG_ERRORS):
        return ConfigError(
            f"S3 settings are incomplete while {what}: {exc}; set credentials and region the standard "
            "AWS way (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, AWS_ENDPOINT_URL for MinIO)"
        )
    if isinstance(exc, ParamValidationError):
        return ConfigError(f"invalid S3 request parameters while {what}: {exc}; check the s3:// location")
    return SourceError(f"S3 request failed while {what}: {exc}")


def _map_client_error(exc: ClientError, what: str) -> ShardwiseError:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    message = f"S3 answered {code or status} ({error.get('Message', 'no message')}) while {what}"
    if code in _TRANSIENT_CODES or status >= 500 or status == 429:
        return TransientError(f"{message}; S3 is throttling or unavailable, retrying may succeed")
    if code == "NoSuchBucket":
        return SourceError(f"{message}; the bucket does not exist: check the bucket name in the location")
    if code in _MISSING_CODES:
        return SourceError(f"{message}; the object does not exist: check the location, or plan again")
    if code in _DENIED_CODES:
        return SourceError(
            f"{message}; access was refused: check the credentials and that they may list and read the prefix"
        )
    if code == "InvalidBucketName":
        return ConfigError(f"{message}; fix the bucket name in the s3:// location")
    return SourceError(message)
