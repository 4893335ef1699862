"""Objects on S3: listed with ``list_objects_v2``, read with ranged, ETag-checked GETs.

One boto3 client serves every thread: botocore clients are thread-safe, boto3
sessions are not, so the client is created once, lazily, under a lock, from a
private session. Credentials and endpoint come from boto3's standard chain
(environment, profile, ``AWS_ENDPOINT_URL``); nothing here reads them itself.

Retries happen in two places. botocore retries each *request* (listing
pages, and a GET's answer: throttling, 5xx, a connection refused or reset
before the answer), a few times within seconds, as :class:`S3ClientConfig`
sets. But a GET returns as soon as its headers arrive, so a connection
dropped while its *body* streams is beyond botocore's retries:
:class:`S3RangeFile` re-reads that byte range itself, so one dropped body
costs a second request, not a failed shard. A GET that botocore gave up on
(still throttled, still 5xx) goes round that loop too. That loop is the
run's :class:`~shardwise.retry_policy.RetryPolicy`: it backs off as every
other layer does and gives up at the run's deadline with a
:class:`~shardwise.errors.RetryDeadlineError` (one read's outage is counted
from its first failure, the moment the shard met it).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, TypeVar, cast

from botocore.config import Config
from botocore.exceptions import ClientError

from shardwise.errors import ConfigError, SourceError, TransientError
from shardwise.retry_policy import Outage, RetryPolicy, retry_step
from shardwise.sources.files.objects import Listing, ObjectInfo, changed_since_listed, is_read
from shardwise.sources.files.s3_errors import s3_boundary

__all__ = ["S3ClientConfig", "S3RangeFile", "S3Store", "parse_s3_url", "retried"]

T = TypeVar("T")

_CHANGED_CODES = frozenset({"PreconditionFailed", "412", "NoSuchKey"})
_LIMITS = (  # (field, whole number?, least value) for S3ClientConfig
    ("client_retries", True, 0),
    ("connect_timeout_s", False, 0.001),
    ("read_timeout_s", False, 0.001),
)


@dataclass(frozen=True, slots=True)
class S3ClientConfig:
    """The boto3 client :class:`S3Store` creates: botocore's ``standard`` retry mode with
    ``client_retries`` quick retries of each request after its first, and explicit timeouts.

    These bound one try of a read; how often a read is tried again, and for
    how long, is the run's :class:`~shardwise.retry_policy.RetryPolicy`.
    """

    client_retries: int = 4
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for name, whole, least in _LIMITS:
            value = getattr(self, name)
            valid = isinstance(value, int if whole else (int, float)) and not isinstance(value, bool)
            if not valid or value < least:
                what = "a whole number" if whole else "a number of seconds"
                raise ConfigError(f"S3ClientConfig.{name} must be {what} >= {least}; got {value!r}")

    def client_config(self) -> Config:
        """The botocore ``Config`` for a client made here: standard-mode retries and explicit timeouts."""
        return Config(
            retries={"mode": "standard", "max_attempts": self.client_retries},
            connect_timeout=self.connect_timeout_s,
            read_timeout=self.read_timeout_s,
        )


def retried(call: Callable[[], T], retry: RetryPolicy, what: str) -> T:
    """``call()``, called again after a :class:`TransientError` until ``retry``'s deadline.

    The outage is this read's, counted from its first failure. Each failed try
    is logged with its number and the wait that follows; past the deadline a
    :class:`~shardwise.errors.RetryDeadlineError` names ``what`` (``reading
    s3://b/k bytes 0-99``) and the last error.
    """
    return retry_step(call, what=what, outage=Outage(retry))


def parse_s3_url(url: str) -> tuple[str, str]:
    """Split ``s3://bucket/key-or-prefix`` into (bucket, key-or-prefix)."""
    bucket, _, key = url.removeprefix("s3://").partition("/")
    if not url.startswith("s3://") or not bucket:
        raise ConfigError(f"S3 location {url!r} has no bucket; write it as s3://bucket/prefix/")
    return bucket, key


class S3Store:
    """Lists and opens the objects under an ``s3://bucket/prefix``.

    A location naming an existing object reads that object alone, whatever its
    name. Otherwise it is a folder-like prefix: every object under
    ``prefix/`` (recursively) whose name ends in one of ``suffixes`` (any, without
    them) is read, and the
    others (``_SUCCESS``, ``.crc``, folder markers) are counted as ignored.
    ``retry`` is the run's policy for reads; ``config`` sets the store's own client.
    """

    def __init__(
        self,
        location: str,
        client: Any | None = None,
        retry: RetryPolicy | None = None,
        suffixes: tuple[str, ...] | None = None,
        config: S3ClientConfig | None = None,
    ) -> None:
        self._bucket, self._prefix = parse_s3_url(location)
        self._suffixes = suffixes  # which listed names are read: the source kind's files
        self._retry = retry or RetryPolicy()
        self._config = config or S3ClientConfig()
        folder = self._prefix.rstrip("/")
        self.identity = f"s3://{self._bucket}/{folder}" if folder else f"s3://{self._bucket}"
        self._client = client
        self._owns_client = client is None
        self._lock = threading.Lock()

    @property
    def retry(self) -> RetryPolicy:
        """How reads, and whole-object reads through this store's client, are retried: the run's policy."""
        return self._retry

    def client(self) -> Any:
        """The shared boto3 S3 client, created on first use with the config's retries and timeouts.

        A client passed in is used as it is: its own retry settings apply to
        requests, and ranged reads are still retried by :class:`S3RangeFile`.
        """
        if self._client is None:
            with self._lock:
                if self._client is None:
                    import boto3  # here, so that local-only use never pays for importing boto3

                    session = boto3.session.Session()
                    self._client = session.client("s3", config=self._config.client_config())
        return self._client

    def listing(self) -> Listing:
        entries = self._list_prefix()
        exact = [o for o in entries if o.key == f"s3://{self._bucket}/{self._prefix}"]
        if exact and not self._prefix.endswith("/"):
            return Listing((exact[0],), ignored=0)
        folder = f"s3://{self._bucket}/{self._prefix.rstrip('/')}/" if self._prefix else ""
        inside = [o for o in entries if o.key.startswith(folder)]
        keep = tuple(o for o in inside if is_read(o.key, self._suffixes))
        return Listing(keep, ignored=len(inside) - len(keep))

    def probe(self) -> None:
        with s3_boundary(f"listing {self.identity}"):
            page = self.client().list_objects_v2(Bucket=self._bucket, Prefix=self._prefix, MaxKeys=1)
        if not page.get("KeyCount", len(page.get("Contents", ()))):
            raise SourceError(
                f"no objects under {self.identity}; check the bucket and prefix of the s3:// location"
            )

    @contextmanager
    def open(self, obj: ObjectInfo) -> Iterator[IO[bytes]]:
        bucket, key = parse_s3_url(obj.key)
        with S3RangeFile(self.client(), bucket, key, obj, self._retry) as handle:
            yield cast(IO[bytes], handle)

    def close(self) -> None:
        with self._lock:
            if self._owns_client and self._client is not None:
                self._client.close()
                self._client = None

    def _list_prefix(self) -> list[ObjectInfo]:
        paginator = self.client().get_paginator("list_objects_v2")
        found: list[ObjectInfo] = []
        with s3_boundary(f"listing {self.identity}"):
            for page in paginator.paginate(Bucket=self._bucket, Prefix=self._prefix):
                found.extend(self._describe(item) for item in page.get("Contents", ()))
        return sorted(found, key=lambda o: o.key)

    def _describe(self, item: dict[str, Any]) -> ObjectInfo:
        return ObjectInfo(
            f"s3://{self._bucket}/{item['Key']}", str(item["ETag"]).strip('"'), int(item["Size"])
        )


class S3RangeFile(io.RawIOBase):
    """A read-only, seekable view of one S3 object: each ``read`` is one ranged GET, retried if it drops.

    The object must still be the version that was listed, or the read fails
    with the "changed since it was listed" :class:`SourceError`, never
    retried. Every GET carries ``If-Match`` with the listed ETag: S3 (and
    moto, which the tests run against) answers 412 for another version, so a
    re-read range can never splice two versions together. The ETag of each
    answer is compared with the listed one too, for S3-compatible stores
    that ignore ``If-Match``. The size comes from the listing, so opening
    costs no request; pyarrow then fetches only the byte ranges it asks for
    (the footer, then the column chunks).
    """

    def __init__(
        self, client: Any, bucket: str, key: str, obj: ObjectInfo, retry: RetryPolicy | None = None
    ) -> None:
        super().__init__()
        self._client, self._bucket, self._key, self._obj = client, bucket, key, obj
        self._retry = retry or RetryPolicy()
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._obj.size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset} in {self._obj.key!r}")
        self._pos = base + offset
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        remaining = self._obj.size - self._pos
        count = remaining if size is None or size < 0 else min(size, remaining)
        if count <= 0:
            return b""
        data = self._get(self._pos, self._pos + count - 1)
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def _get(self, first: int, last: int) -> bytes:
        """Bytes ``first..last``, the same range asked again after a transient failure."""
        what = f"reading {self._obj.key} bytes {first}-{last}"
        return retried(lambda: self._get_once(first, last, what), self._retry, what)

    def _get_once(self, first: int, last: int, what: str) -> bytes:
        with s3_boundary(what):
            response = self._request(first, last)
            body = response["Body"]
            try:
                data = cast(bytes, body.read())  # checks the length against Content-Length
            finally:
                body.close()
        asked = last - first + 1
        if len(data) < asked:
            raise TransientError(f"S3 sent {len(data)} bytes of the {asked} asked while {what}; retrying")
        if len(data) > asked:
            raise SourceError(
                f"S3 sent {len(data)} bytes for a {asked}-byte range while {what}: the endpoint ignores "
                "the Range header; use an S3 endpoint that serves ranged GETs"
            )
        return data

    def _request(self, first: int, last: int) -> Any:
        try:
            response = self._client.get_object(
                Bucket=self._bucket,
                Key=self._key,
                Range=f"bytes={first}-{last}",
                IfMatch=f'"{self._obj.etag}"',
            )
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _CHANGED_CODES:
                raise changed_since_listed(self._obj, f"S3 answered {code} for that ETag") from exc
            raise
        etag = str(response.get("ETag") or "").strip('"')
        if etag and etag != self._obj.etag:
            response["Body"].close()
            raise changed_since_listed(self._obj, f"S3 sent etag {etag!r} instead")
        return response
