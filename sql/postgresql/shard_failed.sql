-- A shard that is already done stays done: a late failure report cannot undo a merge.
UPDATE shardwise_shards
SET status = 'failed',
    attempts = GREATEST(attempts, CAST(:attempt AS integer)),
    finished_at = CAST(:finished_at AS timestamptz),
    last_error = :error
WHERE run_id = :run_id AND shard_id = :shard_id AND status <> 'done'
