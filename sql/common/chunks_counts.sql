-- The count outputs of a run's committed chunks (of one shard, when :shard_id is not NULL), by
-- whichever attempt: summed, they are the shard's or the run's totals. NULL: the model counts nothing.
SELECT counts
FROM shardwise_chunks
WHERE run_id = :run_id AND (CAST(:shard_id AS integer) IS NULL OR shard_id = CAST(:shard_id AS integer))
  AND counts IS NOT NULL
