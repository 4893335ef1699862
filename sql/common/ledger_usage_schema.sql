-- What each committed chunk used (shardwise/cost/usage.py): the device kind it was scored on, the
-- seconds it held it, and its cost in dollars (NULL: not priced: a local model with no price per
-- device-hour, or a remote model the price table does not know). Inserted in the transaction that
-- merges the chunk and writes its mark in shardwise_chunks, so a run's cost is the sum of its
-- committed chunks', exact across retries and resumes. Created with the rest of the ledger
-- (ledger_sql.create_ledger), idempotently.
CREATE TABLE IF NOT EXISTS shardwise_chunk_usage (
    run_id     text NOT NULL,
    shard_id   integer NOT NULL,
    chunk      integer NOT NULL,
    device     text NOT NULL,
    device_s   {DOUBLE} NOT NULL,
    cost_usd   {DOUBLE},
    PRIMARY KEY (run_id, shard_id, chunk)
);
