SELECT id, run_id, shard_id, source_key, error_class, message, input_fingerprint, attempt,
       created_at, results_table
FROM shardwise_errors
WHERE run_id = :run_id
ORDER BY id
