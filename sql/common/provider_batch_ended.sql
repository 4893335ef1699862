-- A recorded provider batch has ended (or its completion window passed): its final status.
UPDATE shardwise_provider_batches
SET status = :status, ended_at = :ended_at
WHERE run_id = :run_id AND shard_id = :shard_id AND window_key = :window_key AND batch_index = :batch_index
