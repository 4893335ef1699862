"""Where a Parquet sink's files live: a local folder or an S3 prefix, behind one small interface.

``publish`` makes a file visible whole (written under a temporary name, then
renamed or copied), ``create`` makes one only if it does not exist (the
manifest entry that commits a chunk: a hard link locally, ``If-None-Match: *``
on S3), ``get`` reads one, ``names`` lists a folder (its names that begin with
``start``, when given: one prefix listing on S3), ``delete`` removes one (a
missing one is no error).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any, Protocol

from botocore.exceptions import ClientError

from shardwise.sources.parquet.s3_errors import s3_boundary

__all__ = ["Files", "LocalFiles", "S3Files"]

_EXISTS_CODES = frozenset({"PreconditionFailed", "412"})


class Files(Protocol):
    """The four file operations the sink needs, on a local directory or an S3 prefix."""

    def publish(self, name: str, body: bytes) -> None: ...
    def create(self, name: str, body: bytes) -> bool: ...
    def get(self, name: str) -> bytes | None: ...
    def names(self, folder: str, start: str = "") -> list[str]: ...
    def delete(self, name: str) -> None: ...


class LocalFiles:
    def __init__(self, root: str) -> None:
        self._root = Path(root)

    def _temp(self, body: bytes, suffix: str) -> Path:
        temp = self._root / "_tmp" / f"{uuid.uuid4().hex}{suffix}"
        temp.parent.mkdir(parents=True, exist_ok=True)
        with open(temp, "wb") as handle:
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        return temp

    def publish(self, name: str, body: bytes) -> None:
        target = self._root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self._temp(body, Path(name).suffix), target)

    def create(self, name: str, body: bytes) -> bool:
        target = self._root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = self._temp(body, ".json")
        try:
            os.link(temp, target)  # atomic and exclusive: the name appears whole or not at all
            return True
        except FileExistsError:
            return False
        finally:
            temp.unlink()

    def get(self, name: str) -> bytes | None:
        try:
            return (self._root / name).read_bytes()
        except FileNotFoundError:
            return None

    def names(self, folder: str, start: str = "") -> list[str]:
        base = self._root / folder
        found = [p for p in base.rglob("*") if p.is_file()] if base.is_dir() else []
        found = [p for p in found if str(p.relative_to(base)).replace(os.sep, "/").startswith(start)]
        return sorted(str(p.relative_to(self._root)).replace(os.sep, "/") for p in found)

    def delete(self, name: str) -> None:
        (self._root / name).unlink(missing_ok=True)


class S3Files:
    """The files under ``s3://bucket/prefix``; messages name a file as ``NAME in SHOWN`` (the sink's
    target, which may be a reference such as ``env:NAME``), never by its resolved location."""

    def __init__(self, client: Any, bucket: str, prefix: str, shown: str | None = None) -> None:
        self._client, self._bucket, self._prefix = client, bucket, prefix
        self._shown = shown or f"s3://{bucket}/{prefix}"

    def _named(self, name: str) -> str:
        return f"{name} in {self._shown}"

    def _key(self, name: str) -> str:
        return f"{self._prefix}/{name}"

    def publish(self, name: str, body: bytes) -> None:
        temp = self._key(f"_tmp/{uuid.uuid4().hex}{Path(name).suffix}")
        with s3_boundary(f"writing {self._named(name)}"):
            self._client.put_object(Bucket=self._bucket, Key=temp, Body=body)
            source = {"Bucket": self._bucket, "Key": temp}
            self._client.copy_object(Bucket=self._bucket, Key=self._key(name), CopySource=source)
            self._client.delete_object(Bucket=self._bucket, Key=temp)

    def create(self, name: str, body: bytes) -> bool:
        with s3_boundary(f"creating {self._named(name)}"):
            try:
                self._client.put_object(Bucket=self._bucket, Key=self._key(name), Body=body, IfNoneMatch="*")
            except ClientError as exc:
                if str(exc.response.get("Error", {}).get("Code", "")) in _EXISTS_CODES:
                    return False  # created before: S3 refused to replace it
                raise
        return True

    def get(self, name: str) -> bytes | None:
        with s3_boundary(f"reading {self._named(name)}"):
            try:
                response = self._client.get_object(Bucket=self._bucket, Key=self._key(name))
            except ClientError as exc:
                if str(exc.response.get("Error", {}).get("Code", "")) in {"NoSuchKey", "404"}:
                    return None
                raise
            return bytes(response["Body"].read())

    def names(self, folder: str, start: str = "") -> list[str]:
        prefix = f"{self._key(folder)}/{start}"
        found: list[str] = []
        with s3_boundary(f"listing {self._named(f'{folder}/{start}')}"):
            for page in self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self._bucket, Prefix=prefix
            ):
                found.extend(item["Key"][len(self._prefix) + 1 :] for item in page.get("Contents", ()))
        return sorted(found)

    def delete(self, name: str) -> None:
        with s3_boundary(f"deleting {self._named(name)}"):
            self._client.delete_object(Bucket=self._bucket, Key=self._key(name))
