"""Where a Parquet sink's files live: a local folder or an S3 prefix, behind one small interface.

``publish`` makes a file visible whole (written under a temporary name, then
renamed or copied), ``create`` makes one only if it does not exist (the
manifest entry that commits a chunk: a hard link locally, ``If-None-Match: *``
on S3), ``get`` reads one, ``exists`` asks whether one is there, ``names``
lists a folder (its names that begin with ``start``, when given: one prefix
listing on S3), ``modified`` lists it with each file's last change (seconds
since the epoch: the file's mtime, S3's ``LastModified``), ``delete``
removes one (a missing one is no error).

A temporary file is named for the file it becomes: ``_tmp/<uuid>.<name>``,
the name's ``/`` written ``~`` (:func:`temp_name`, :func:`temp_target`), so a
temporary file a killed writer left says whose it was (the run id is in the
name) and a later run can tell a leftover from a live writer's file (see
:mod:`shardwise.sinks.parquet.leftovers`).
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Any, Protocol

from botocore.exceptions import ClientError

from shardwise.sources.files.s3_errors import s3_boundary

__all__ = ["TEMP_FOLDER", "Files", "LocalFiles", "S3Files", "temp_name", "temp_target"]

TEMP_FOLDER = "_tmp"
_EXISTS_CODES = frozenset({"PreconditionFailed", "412"})
_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_TOKEN = re.compile(r"[0-9a-f]{32}")


def temp_name(name: str) -> str:
    """A fresh temporary name for ``name``: ``_tmp/<uuid>.<name with / as ~>`` (``~`` is in no name the
    sink writes: run ids, shard and chunk numbers, tokens)."""
    return f"{TEMP_FOLDER}/{uuid.uuid4().hex}.{name.replace('/', '~')}"


def temp_target(temp: str) -> str | None:
    """The name a temporary file was to become; None for a name :func:`temp_name` did not make (one an
    older release wrote, ``_tmp/<uuid>.parquet``)."""
    token, dot, flat = temp.removeprefix(f"{TEMP_FOLDER}/").partition(".")
    if not dot or not _TOKEN.fullmatch(token) or "." not in flat:  # every name the sink writes has a suffix
        return None
    return flat.replace("~", "/")


class Files(Protocol):
    """The file operations the sink needs, on a local directory or an S3 prefix."""

    def publish(self, name: str, body: bytes) -> None: ...
    def create(self, name: str, body: bytes) -> bool: ...
    def get(self, name: str) -> bytes | None: ...
    def exists(self, name: str) -> bool: ...
    def names(self, folder: str, start: str = "") -> list[str]: ...
    def modified(self, folder: str) -> dict[str, float]: ...
    def delete(self, name: str) -> None: ...


class LocalFiles:
    def __init__(self, root: str) -> None:
        self._root = Path(root)

    def _temp(self, body: bytes, name: str) -> Path:
        temp = self._root / temp_name(name)
        temp.parent.mkdir(parents=True, exist_ok=True)
        with open(temp, "wb") as handle:
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        return temp

    def publish(self, name: str, body: bytes) -> None:
        target = self._root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self._temp(body, name), target)

    def create(self, name: str, body: bytes) -> bool:
        target = self._root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = self._temp(body, name)
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

    def exists(self, name: str) -> bool:
        return (self._root / name).is_file()

    def names(self, folder: str, start: str = "") -> list[str]:
        return sorted(name for name, _ in self._files(folder, start))

    def modified(self, folder: str) -> dict[str, float]:
        found = {}
        for name, path in self._files(folder, ""):
            try:
                found[name] = path.stat().st_mtime
            except FileNotFoundError:  # deleted since it was listed
                continue
        return found

    def _files(self, folder: str, start: str) -> list[tuple[str, Path]]:
        base = self._root / folder
        found = [p for p in base.rglob("*") if p.is_file()] if base.is_dir() else []
        found = [p for p in found if str(p.relative_to(base)).replace(os.sep, "/").startswith(start)]
        return [(str(p.relative_to(self._root)).replace(os.sep, "/"), p) for p in found]

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
        temp = self._key(temp_name(name))
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

    def exists(self, name: str) -> bool:
        with s3_boundary(f"looking for {self._named(name)}"):
            try:
                self._client.head_object(Bucket=self._bucket, Key=self._key(name))
            except ClientError as exc:
                if str(exc.response.get("Error", {}).get("Code", "")) in _MISSING_CODES:
                    return False
                raise
        return True

    def names(self, folder: str, start: str = "") -> list[str]:
        return sorted(self._listing(folder, start))

    def modified(self, folder: str) -> dict[str, float]:
        return self._listing(folder, "")

    def _listing(self, folder: str, start: str) -> dict[str, float]:
        prefix = f"{self._key(folder)}/{start}"
        found: dict[str, float] = {}
        with s3_boundary(f"listing {self._named(f'{folder}/{start}')}"):
            for page in self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self._bucket, Prefix=prefix
            ):
                for item in page.get("Contents", ()):
                    found[item["Key"][len(self._prefix) + 1 :]] = item["LastModified"].timestamp()
        return found

    def delete(self, name: str) -> None:
        with s3_boundary(f"deleting {self._named(name)}"):
            self._client.delete_object(Bucket=self._bucket, Key=self._key(name))
