SELECT position, rows_inserted, rows_updated, rows_unchanged
FROM shardwise_commits
WHERE run_id = :run_id AND shard_id = :shard_id AND chunk = :chunk
