-- No attempt of the shard is coming (shard_states.py checked the transition and locked the row;
-- a done shard stays done: a late failure report cannot undo a merge). The attempt was counted
-- when it started (shard_attempt.sql).
UPDATE shardwise_shards
SET status = 'failed',
    finished_at = :finished_at,
    last_error = :error
WHERE run_id = :run_id AND shard_id = :shard_id AND status <> 'done'
