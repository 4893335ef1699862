SELECT shard_id FROM shardwise_shards WHERE run_id = :run_id AND status = 'done'
