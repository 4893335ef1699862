-- One run's shards as the ledger records them: what ran where, and how it went.
SELECT shard_id, status, attempts, expected_rows, rows_in, rows_out, rows_failed,
       rows_inserted, rows_updated, rows_unchanged, started_at, finished_at,
       host, device, engine, last_error
FROM shardwise_shards
WHERE run_id = :run_id
ORDER BY shard_id
