-- A chunk's dead letters, in the ledger transaction that marks the chunk, so a retried or resumed
-- chunk never doubles them.
INSERT INTO shardwise_errors (
    run_id, shard_id, source_key, error_class, message, input_fingerprint, attempt, created_at, results_table
)
VALUES (
    :run_id, :shard_id, :source_key, :error_class, :message, :input_fingerprint, :attempt, :created_at,
    :results_table
)
