UPDATE shardwise_shards
SET attempts = GREATEST(attempts, CAST(:attempt AS integer)),
    started_at = CAST(:started_at AS timestamptz),
    host = COALESCE(CAST(:host AS text), host),
    device = COALESCE(CAST(:device AS text), device)
WHERE run_id = :run_id AND shard_id = :shard_id AND status <> 'done'
