"""What a run costs: tokens, device time and dollars, measured per chunk and summed per run.

* :mod:`.prices`: how a chunk is priced. A local model by the device time it
  held (seconds times the operator's price per device-hour); a remote model
  (``openai:NAME``, ``anthropic:NAME``) by its tokens, at the prices of the
  ``genai-prices`` table, which ships its data (nothing is fetched at run time).
* :mod:`.usage`: a chunk's measured usage as its mark records it, and a run's
  usage summed from those marks, with the figures people compare runs by
  (``$/1k rows``, ``$/1M tokens``, device-hours).
* :mod:`.meter`: measures each chunk of a shard attempt as it is cut.

Nothing here reads the environment: the flow gives the price per device-hour.
"""

from __future__ import annotations

from shardwise.cost.prices import Pricing, remote_model, token_cost
from shardwise.cost.usage import ChunkUsage, RunUsage

__all__ = ["ChunkUsage", "Pricing", "RunUsage", "remote_model", "token_cost"]
