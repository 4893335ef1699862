-- A resumed run retries its failed shards; done shards stay done.
UPDATE shardwise_shards
SET status = 'pending'
WHERE run_id = :run_id AND status = 'failed'
