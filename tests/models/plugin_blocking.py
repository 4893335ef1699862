"""A model plug-in that blocks for ever on one row, as a read of a FIFO named by a row does.

tests/flows/test_cli_signals.py runs it: ``--model plugin_blocking:spec``,
with ``tests/models`` on PYTHONPATH. It is the small tiny encoder under the
name ``blocking``. With :data:`FIFO_ENV` naming a FIFO in the environment,
preparing the row whose text is :data:`BLOCK_ON` first creates the file
``FIFO + ".blocked"`` (so a test knows a worker is stuck now), then opens
the FIFO for reading, which waits in the kernel until a writer comes: none
does. Without the variable the row is scored like any other, so a resume
(or a clean run) of the same rows with the same model version finishes.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import torch

from shardwise.model import Encoding, ModelInfo
from shardwise.models.hf.encoders.tiny import TinyModel, TinySpec

__all__ = ["BLOCK_ON", "FIFO_ENV", "spec"]

BLOCK_ON = "this row blocks its worker"
FIFO_ENV = "SHARDWISE_TEST_BLOCK_FIFO"
_TINY = TinySpec(name="blocking", dim=16, layers=1, heads=2)


class Blocking:
    """The spec: the tiny encoder's description and weights; its model blocks on :data:`BLOCK_ON`."""

    name = "blocking"

    def describe(self) -> ModelInfo:
        return replace(_TINY.describe(), name=self.name)

    def load(self, device: torch.device) -> TinyModel:
        return _BlockingTiny(_TINY, device)


class _BlockingTiny(TinyModel):
    def prepare(self, value: object) -> Encoding:
        fifo = os.environ.get(FIFO_ENV)
        if fifo and value == BLOCK_ON:
            Path(fifo + ".blocked").touch()
            with open(fifo, "rb") as never:  # blocks here: nobody opens the FIFO for writing
                never.read()
        return super().prepare(value)


spec = Blocking()
