-- One run's shards as a progress display needs them: done shards' counts, running ones' progress.
-- progress_counts holds a running attempt's count outputs so far, and a done shard's totals.
SELECT shard_id, status, expected_rows, rows_in, rows_failed, progress_rows, progress_failed,
       progress_counts
FROM shardwise_shards
WHERE run_id = :run_id
ORDER BY shard_id
