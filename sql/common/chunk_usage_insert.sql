-- A chunk's usage, in the transaction that merges the chunk (see ledger_schema.sql).
INSERT INTO shardwise_chunk_usage (run_id, shard_id, chunk, device, device_s, cost_usd)
VALUES (:run_id, :shard_id, :chunk, :device, :device_s, :cost_usd)
