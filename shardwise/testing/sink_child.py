"""The writer process the sink contract kills: ``python -m shardwise.testing.sink_child PLACE CHUNKS [KILL]``.

``PLACE`` is a :class:`~shardwise.testing.sink.SinkPlace` as JSON. The writer prints ``ready``, then
commits chunks ``0 .. CHUNKS - 1`` of shard 0, printing each. Given ``KILL``, it kills itself with
SIGKILL as its commit of that chunk returns: before any ledger could mark it. Settings (S3's) come from
the environment, as a worker's do.
"""

from __future__ import annotations

import os
import signal
import sys

from shardwise.testing.rows import chunk
from shardwise.testing.sink import SinkPlace


def main(argv: list[str]) -> None:
    place, chunks = SinkPlace.from_json(argv[0]), int(argv[1])
    kill_after = int(argv[2]) if len(argv) > 2 else None
    sink = place.open()
    print("ready", flush=True)
    for number in range(chunks):
        sink.commit(chunk(number))
        print("committed", number, flush=True)
        if number == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1:])
