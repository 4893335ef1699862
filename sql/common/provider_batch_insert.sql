-- Record one provider batch of a window, in its own transaction, before the run waits on it. A batch
-- of the same window and index already recorded (a racing writer) is kept: no row comes back then;
-- one recorded as lost (its provider answered 404) is replaced by the batch submitted in its place.
INSERT INTO shardwise_provider_batches (
    run_id, shard_id, window_key, batch_index, position, first_key, rows_sent, provider, batch_id,
    submitted_at, status
)
VALUES (
    :run_id, :shard_id, :window_key, :batch_index, :position, :first_key, :rows_sent, :provider,
    :batch_id, :submitted_at, 'submitted'
)
ON CONFLICT (run_id, shard_id, window_key, batch_index) DO UPDATE SET
    position = excluded.position, first_key = excluded.first_key, rows_sent = excluded.rows_sent,
    provider = excluded.provider, batch_id = excluded.batch_id, submitted_at = excluded.submitted_at,
    status = 'submitted', ended_at = NULL
WHERE shardwise_provider_batches.status = 'lost'
RETURNING batch_id
