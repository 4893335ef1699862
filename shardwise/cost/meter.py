"""Measures each chunk of a shard attempt as it is cut: the device time it took and what it cost.

A chunk's device time runs from the previous chunk's commit (or the start of
the attempt's scoring) to the chunk's last result: the rows were read,
prepared and scored on the device in that time, which the attempt's
device lease held. The commit's own database time is left out, and so is
loading the model (once per worker process, for every run it scores).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from shardwise.cost.prices import Pricing
from shardwise.cost.usage import REMOTE, ChunkUsage, device_kind
from shardwise.model.counts import counts_of_rows

__all__ = ["ChunkMeter"]


class ChunkMeter:
    """Times and prices the chunks of one attempt on ``device``; ``counted`` names the count outputs."""

    def __init__(
        self,
        device: str,
        pricing: Pricing,
        counted: Sequence[str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # A remote model holds none of our devices: its chunks record no device time (see NO_DEVICE).
        self.device = REMOTE if pricing.remote is not None else device_kind(device)
        self.pricing, self.counted = pricing, tuple(counted)
        self._clock = clock
        self._since = clock()

    def restart(self) -> None:
        """Start the next chunk's clock: call it once a chunk is committed."""
        self._since = self._clock()

    def measure(self, values: Iterable[Mapping[str, Any]]) -> ChunkUsage:
        """The usage of the chunk whose scored rows' values are ``values``, cut now."""
        seconds = 0.0 if self.device == REMOTE else max(0.0, self._clock() - self._since)
        rows = [counts_of_rows([row], self.counted) for row in values]
        return ChunkUsage(self.device, seconds, self.pricing.cost(rows, seconds))
