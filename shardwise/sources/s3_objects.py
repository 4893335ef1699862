"""Parquet objects on S3: listed with ``list_objects_v2``, read with ranged, ETag-checked GETs.

One boto3 client serves every thread: botocore clients are thread-safe, boto3
sessions are not, so the client is created once, lazily, under a lock, from a
private session. Credentials and endpoint come from boto3's standard chain
(environment, profile, ``AWS_ENDPOINT_URL``); nothing here reads them itself.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any, cast

from botocore.exceptions import ClientError

from shardwise.errors import ConfigError, SourceError
from shardwise.sources.objects import Listing, ObjectInfo, changed_since_listed, is_parquet_name
from shardwise.sources.s3_errors import s3_boundary

__all__ = ["S3RangeFile", "S3Store", "parse_s3_url"]

_CHANGED_CODES = frozenset({"PreconditionFailed", "412", "NoSuchKey"})


def parse_s3_url(url: str) -> tuple[str, str]:
    """Split ``s3://bucket/key-or-prefix`` into (bucket, key-or-prefix)."""
    bucket, _, key = url.removeprefix("s3://").partition("/")
    if not url.startswith("s3://") or not bucket:
        raise ConfigError(f"S3 location {url!r} has no bucket; write it as s3://bucket/prefix/")
    return bucket, key


class S3Store:
    """Lists and opens the Parquet objects under an ``s3://bucket/prefix``.

    A location naming an existing object reads that object alone, whatever its
    name. Otherwise it is a folder-like prefix: every object under
    ``prefix/`` (recursively) whose name ends in ``.parquet`` is read, and the
    others (``_SUCCESS``, ``.crc``, folder markers) are counted as ignored.
    """

    def __init__(self, location: str, client: Any | None = None) -> None:
        self._bucket, self._prefix = parse_s3_url(location)
        folder = self._prefix.rstrip("/")
        self.identity = f"s3://{self._bucket}/{folder}" if folder else f"s3://{self._bucket}"
        self._client = client
        self._owns_client = client is None
        self._lock = threading.Lock()

    def client(self) -> Any:
        """The shared boto3 S3 client, created on first use."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    import boto3  # here, so that local-only use never pays for importing boto3

                    self._client = boto3.session.Session().client("s3")
        return self._client

    def listing(self) -> Listing:
        entries = self._list_prefix()
        exact = [o for o in entries if o.key == f"s3://{self._bucket}/{self._prefix}"]
        if exact and not self._prefix.endswith("/"):
            return Listing((exact[0],), ignored=0)
        folder = f"s3://{self._bucket}/{self._prefix.rstrip('/')}/" if self._prefix else ""
        inside = [o for o in entries if o.key.startswith(folder)]
        keep = tuple(o for o in inside if is_parquet_name(o.key))
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
        with S3RangeFile(self.client(), bucket, key, obj) as handle:
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
    """A read-only, seekable view of one S3 object: each ``read`` is one ranged GET.

    Every GET carries ``If-Match`` with the listed ETag, so a replaced object
    fails with :class:`SourceError` instead of mixing two versions. The size
    comes from the listing, so opening costs no request; pyarrow then fetches
    only the byte ranges it asks for (the footer, then the column chunks).
    """

    def __init__(self, client: Any, bucket: str, key: str, obj: ObjectInfo) -> None:
        super().__init__()
        self._client, self._bucket, self._key, self._obj = client, bucket, key, obj
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
        with s3_boundary(f"reading {self._obj.key} bytes {first}-{last}"):
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
            body = response["Body"]
            try:
                return cast(bytes, body.read())
            finally:
                body.close()
