"""Loaded models, cached per process and device: a worker loads each model once, not once per shard."""

from __future__ import annotations

import threading

import torch

from models import get_spec
from shardwise.model import Model

__all__ = ["load_model"]

_CACHE: dict[tuple[str, str], Model] = {}
_LOCK = threading.Lock()


def load_model(name: str, device: torch.device) -> Model:
    """The model ``name`` on ``device``, loaded on first use and shared by later shard tasks."""
    key = (name, str(device))
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = get_spec(name).load(device)
        return _CACHE[key]
