-- A resumed run retries its failed shards; done shards stay done (shard_states.reset_failed
-- records each one's transition).
UPDATE shardwise_shards
SET status = 'pending'
WHERE run_id = :run_id AND status = 'failed'
