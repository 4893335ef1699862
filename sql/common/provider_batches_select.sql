-- The provider batches recorded for one window of a shard, in order.
SELECT run_id, shard_id, window_key, batch_index, position, first_key, rows_sent, provider, batch_id,
       submitted_at, status, ended_at
FROM shardwise_provider_batches
WHERE run_id = :run_id AND shard_id = :shard_id AND window_key = :window_key
ORDER BY batch_index
