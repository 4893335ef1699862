-- How far a running attempt has got: rows through the engine, dead letters and count outputs so far.
-- Only the current attempt of a shard not yet done may write. SKIP LOCKED: while a
-- merge holds the row, this report is skipped instead of waiting for it.
UPDATE shardwise_shards
SET progress_rows = :rows,
    progress_failed = :failed,
    progress_counts = :counts,
    progress_at = :progress_at
WHERE (run_id, shard_id) IN (
    SELECT run_id, shard_id FROM shardwise_shards
    WHERE run_id = :run_id AND shard_id = :shard_id AND attempts = :attempt AND status <> 'done'
    FOR UPDATE SKIP LOCKED
)
