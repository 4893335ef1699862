INSERT INTO shardwise_shards (run_id, shard_id, bounds, expected_rows, status, attempts)
VALUES (:run_id, :shard_id, :bounds, :expected_rows, 'pending', 0)
ON CONFLICT (run_id, shard_id) DO NOTHING
