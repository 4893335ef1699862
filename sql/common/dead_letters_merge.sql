-- Runs in the shard's merge transaction, so a retried shard never doubles its dead letters.
INSERT INTO shardwise_errors (
    run_id, shard_id, source_key, error_class, message, input_fingerprint, attempt, created_at, results_table
)
SELECT CAST(:run_id AS text), CAST(:shard_id AS integer), source_key, error_class, message,
       input_fingerprint, CAST(:attempt AS integer), :created_at,
       CAST(:results_table AS text)
FROM shardwise_dead_stage
ORDER BY seq
