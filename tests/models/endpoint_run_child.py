"""One endpoint generation run through the pipeline API, in a process of its own, for the kill test.

``python endpoint_run_child.py URL API_BASE RUN_ID [resume] [batch-api]``: scores table ``docs`` of the
SQLite database at URL into ``gen`` with ``openai:tiny-llama`` at API_BASE, one shard committed every 16
rows; with ``resume``, resumes run RUN_ID instead of starting it; with ``batch-api``, through the Batch
API, polling every 0.2 s.
"""

from __future__ import annotations

import sys

from endpoint_servers import KEY_REFERENCE, SERVED_NAME, resolver
from spec_builder import flat_spec

from shardwise.model.generation import GenerationSettings
from shardwise.models.endpoints import EndpointOptions, EndpointSpec
from shardwise.pipeline import WorkerCache, prepare_run, score_pending

CHUNK_ROWS = 16


def main(url: str, base: str, run_id: str, resume: bool, batch_api: bool = False) -> None:
    options = EndpointOptions(
        api_base=base, api_key=KEY_REFERENCE, max_concurrency=4, batch_api=batch_api, batch_poll_s=0.2
    )
    model = EndpointSpec("openai", SERVED_NAME, options, GenerationSettings(max_new_tokens=8)).resolving(
        resolver
    )
    cache = WorkerCache(lambda name: model, resolve=resolver)  # the run's resolver reads the key
    run = flat_spec(
        source=url, table="docs", results=url, results_table="gen", model=model.name, shards=1,
        chunk_rows=CHUNK_ROWS, resume=run_id if resume else None,
    )  # fmt: skip
    planned = prepare_run(
        run, run_id=run_id, started_by="test", parameters={}, model=model.describe(), cache=cache
    )
    try:
        score_pending(planned, cache)
    finally:
        planned.close()
        cache.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], "resume" in sys.argv[4:], "batch-api" in sys.argv[4:])
