-- Every provider batch a run recorded, by shard, window position and index.
SELECT run_id, shard_id, window_key, batch_index, position, first_key, rows_sent, provider, batch_id,
       submitted_at, status, ended_at
FROM shardwise_provider_batches
WHERE run_id = :run_id
ORDER BY shard_id, position, batch_index
