-- A shard's status, read without a lock (the ledger check before a chunk goes to the sink).
SELECT status FROM shardwise_shards
WHERE run_id = :run_id AND shard_id = :shard_id
