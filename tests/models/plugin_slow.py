"""A model plug-in that scores slowly, so a test can stop its worker mid-shard.

tests/flows/test_worker_preemption.py runs it: ``--model plugin_slow:spec``,
with ``tests/models`` on PYTHONPATH. It is the small tiny encoder under the
name ``slow``; each forward pass first sleeps :data:`SLEEP_ENV` seconds per
row of its batch (from the environment; 0 without it), so the scores are the
tiny encoder's.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

import torch

from shardwise.model import ModelInfo, ModelInputs
from shardwise.models.hf.encoders.tiny import TinyModel, TinySpec

__all__ = ["SLEEP_ENV", "spec"]

SLEEP_ENV = "SHARDWISE_TEST_SLOW_ROW_S"
_TINY = TinySpec(name="slow", dim=16, layers=1, heads=2)


class Slow:
    """The spec: the tiny encoder's description and weights; its model sleeps in each forward pass."""

    name = "slow"

    def describe(self) -> ModelInfo:
        return replace(_TINY.describe(), name=self.name)

    def load(self, device: torch.device) -> TinyModel:
        return _SlowTiny(_TINY, device)


class _SlowTiny(TinyModel):
    def run(self, batch: ModelInputs) -> torch.Tensor:
        time.sleep(float(os.environ.get(SLEEP_ENV, "0")) * int(batch.input_ids.shape[0]))
        return super().run(batch)


spec = Slow()
