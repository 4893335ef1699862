-- A shard that is already done stays done: a late failure report cannot undo a merge.
UPDATE shardwise_shards
SET status = 'failed',
    attempts = max(attempts, CAST(:attempt AS integer)),
    finished_at = :finished_at,
    last_error = :error
WHERE run_id = :run_id AND shard_id = :shard_id AND status <> 'done'
