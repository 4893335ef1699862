-- Record one provider batch of a window, in its own transaction, before the run waits on it. A batch
-- of the same window and index already recorded (a racing writer) is kept: no row comes back then.
INSERT INTO shardwise_provider_batches (
    run_id, shard_id, window_key, batch_index, position, first_key, rows_sent, provider, batch_id,
    submitted_at, status
)
VALUES (
    :run_id, :shard_id, :window_key, :batch_index, :position, :first_key, :rows_sent, :provider,
    :batch_id, :submitted_at, 'submitted'
)
ON CONFLICT (run_id, shard_id, window_key, batch_index) DO NOTHING
RETURNING batch_id
