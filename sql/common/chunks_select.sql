-- One run's chunk marks, in shard and chunk order.
SELECT shard_id, chunk, attempt, rows_in, rows_out, rows_failed, rows_truncated,
       rows_inserted, rows_updated, rows_unchanged, position, committed_at, counts
FROM shardwise_chunks
WHERE run_id = :run_id
ORDER BY shard_id, chunk
