"""Content hashes that identify a model version (input fingerprints are :mod:`shardwise.lineage`)."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

__all__ = ["hash_file", "hash_files", "hash_state"]

_CHUNK = 1 << 20


def hash_files(root: Path, names: Iterable[str]) -> str:
    """SHA-256 over the named files' relative paths and bytes, in sorted order.

    Missing names are skipped, so optional files (a pooling config) may be listed.
    The result is remembered per process for as long as every file keeps its
    size and modification time: describing a model and loading it then read
    its weights once, not twice.
    """
    present = []
    for name in sorted(set(names)):
        path = root / name
        if path.is_file():
            stat = path.stat()
            present.append((name, stat.st_size, stat.st_mtime_ns))
    return _hash_present(root.resolve(), tuple(present))


@functools.lru_cache(maxsize=64)
def _hash_present(root: Path, present: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, _, _ in present:
        digest.update(name.encode() + b"\0")
        _feed(digest, root / name)
    return digest.hexdigest()


def hash_file(path: Path) -> str:
    """SHA-256 over one file's bytes, its name left out: a renamed or moved copy keeps its hash.

    Remembered per process, as :func:`hash_files` is, while the file keeps its size and
    modification time.
    """
    stat = path.stat()
    return _hash_one(path.resolve(), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _hash_one(path: Path, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    _feed(digest, path)
    return digest.hexdigest()


def _feed(digest: Any, path: Path) -> None:
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)


def hash_state(config: Mapping[str, Any], state: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 over a JSON config and every tensor of a state dict, keys sorted."""
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
    for key in sorted(state):
        tensor = state[key].detach().to("cpu").contiguous()
        digest.update(key.encode() + b"\0" + str(tensor.dtype).encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()
