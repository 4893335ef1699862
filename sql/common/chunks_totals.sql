-- A shard's totals over every chunk committed, by whichever attempt: what its done-mark records.
SELECT COUNT(*) AS chunks,
       COALESCE(SUM(rows_in), 0) AS rows_in,
       COALESCE(SUM(rows_out), 0) AS rows_out,
       COALESCE(SUM(rows_failed), 0) AS rows_failed,
       COALESCE(SUM(rows_truncated), 0) AS rows_truncated,
       COALESCE(SUM(rows_inserted), 0) AS rows_inserted,
       COALESCE(SUM(rows_updated), 0) AS rows_updated,
       COALESCE(SUM(rows_unchanged), 0) AS rows_unchanged
FROM shardwise_chunks
WHERE run_id = :run_id AND shard_id = :shard_id
